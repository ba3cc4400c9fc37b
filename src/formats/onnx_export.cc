#include "formats/onnx_export.h"

#include <cstring>

#include "core/file_io.h"
#include "formats/graph_json.h"
#include "formats/onnx_export_ops.h"

namespace bks {
namespace onnx_export {

namespace {

// Opset 13: what ONNX Runtime, TensorRT and onnx 1.12's checker all read, with Softmax over
// one axis (Caffe's) and Squeeze/Unsqueeze axes as inputs.
constexpr int kOpset = 13;
constexpr int kIrVersion = 7;  // the IR version that goes with opset 13

std::map<std::string, Writer>& registry() {
  static std::map<std::string, Writer> r;
  return r;
}

void put_shape(onnx::ValueInfoProto& v, const Shape& shape, bool symbolic_batch) {
  v.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = v.mutable_type()->mutable_tensor_type()->mutable_shape();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == 0 && symbolic_batch)
      s->add_dim()->set_dim_param("N");
    else
      s->add_dim()->set_dim_value(shape[i]);
  }
}

}  // namespace

bool register_onnx_export(const char* type, Writer fn) {
  registry()[type] = fn;
  return true;
}

Writer find_onnx_export(const std::string& type) {
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : it->second;
}

NodeWriter::NodeWriter(ExportState& s, int node)
    : s_(s), n_(s.g.nodes.at(node)), index_(node), attrs_(attrs_to_json(n_)) {}

std::string NodeWriter::where() const { return s_.g.describe(index_); }

namespace {

const nlohmann::json& field(const NodeWriter& w, const char* name) {
  auto it = w.attrs().find(name);
  // Writers ask for the fields their type's struct has; a missing one is a bug.
  if (it == w.attrs().end()) runtime_error("{}: the ONNX writer asks for attribute '{}', which it has not", w.where(), name);
  return *it;
}

}  // namespace

int64_t NodeWriter::attr_int(const char* name) const { return field(*this, name).get<int64_t>(); }
float NodeWriter::attr_float(const char* name) const { return field(*this, name).get<float>(); }
bool NodeWriter::attr_bool(const char* name) const { return field(*this, name).get<bool>(); }
std::string NodeWriter::attr_enum(const char* name) const { return field(*this, name).get<std::string>(); }
std::vector<int64_t> NodeWriter::attr_ints(const char* name) const {
  return field(*this, name).get<std::vector<int64_t>>();
}
std::vector<float> NodeWriter::attr_floats(const char* name) const { return field(*this, name).get<std::vector<float>>(); }

std::string NodeWriter::in(int i) const { return s_.value_names.at(n_.inputs.at(i)); }
const Shape& NodeWriter::in_shape(int i) const { return s_.g.values.at(n_.inputs.at(i)).shape; }
std::string NodeWriter::out(int i) const { return s_.value_names.at(n_.outputs.at(i)); }
const Shape& NodeWriter::out_shape(int i) const { return s_.g.values.at(n_.outputs.at(i)).shape; }

const Tensor& NodeWriter::blob(int i) const {
  if (i >= num_blobs()) fail("has {} parameter blob(s); its ONNX form needs blob {}", num_blobs(), i);
  auto it = s_.weights.find(n_.params[i].key);
  if (it == s_.weights.end() || !it->second.defined()) fail("parameter blob '{}' has no weights", n_.params[i].key);
  return it->second;
}

std::string NodeWriter::temp(const std::string& suffix) { return s_.unique(n_.name + "/" + suffix); }

std::string NodeWriter::initializer(const std::string& suffix, const Tensor& t, const Shape& shape) {
  if (t.dtype() != DType::f32 || shape_numel(shape) != t.numel())
    runtime_error("{}: initializer '{}' of {} elements given shape {}", where(), suffix, t.numel(), shape_str(shape));
  onnx::TensorProto* p = s_.out.add_initializer();
  p->set_name(s_.unique(n_.name + "." + suffix));
  p->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) p->add_dims(d);
  p->set_raw_data(t.raw(), t.bytes());  // little-endian f32, as ONNX's raw_data is
  return p->name();
}

std::string NodeWriter::initializer(const std::string& suffix, const std::vector<float>& v, const Shape& shape) {
  Tensor t({static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return initializer(suffix, t, shape);
}

std::string NodeWriter::int64s(const std::string& suffix, const std::vector<int64_t>& v) {
  onnx::TensorProto* p = s_.out.add_initializer();
  p->set_name(s_.unique(n_.name + "." + suffix));
  p->set_data_type(onnx::TensorProto::INT64);
  p->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) p->add_int64_data(x);
  return p->name();
}

onnx::NodeProto& NodeWriter::add(const std::string& op, const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& outputs) {
  onnx::NodeProto* p = s_.out.add_node();
  p->set_op_type(op);
  p->set_name(s_.unique(n_.name + (s_.nodes_of_layer++ ? "/" + op : "")));
  for (const auto& i : inputs) p->add_input(i);
  for (const auto& o : outputs) p->add_output(o);
  ++s_.nodes;
  return *p;
}

void set_attr(onnx::NodeProto& n, const char* name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_attr(onnx::NodeProto& n, const char* name, float v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void set_attr(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void NodeWriter::graph_input(int i) {
  onnx::ValueInfoProto* v = s_.out.add_input();
  v->set_name(out(i));
  put_shape(*v, out_shape(i), s_.dynamic_batch);
}

}  // namespace onnx_export

OnnxExportResult export_onnx(const Graph& g, const std::map<std::string, Tensor>& weights, const std::string& path,
                             const OnnxExportOptions& o) {
  using namespace onnx_export;
  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name(o.producer);
  model.set_producer_version(BKS_VERSION);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto& out = *model.mutable_graph();
  out.set_name(g.name.empty() ? "bakusoku" : g.name);

  ExportState s{g, weights, out};
  s.dynamic_batch = o.dynamic_batch;
  // Caffe's in-place layers give several values one blob name: later ones get a suffix.
  for (const Value& v : g.values) s.value_names.push_back(s.unique(v.name));
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    Writer w = find_onnx_export(node.type);
    if (!w) input_error("{}: ONNX export does not support layer type {} (docs/onnx.md lists those it does)",
                        g.describe(static_cast<int>(n)), node.type);
    if (node.deploy.fusion.any() || node.deploy.precision != Precision::fp32 || node.deploy.int8_input_threshold > 0)
      runtime_error("{}: ONNX export takes the graph before fusion and quantization", g.describe(static_cast<int>(n)));
    NodeWriter nw(s, static_cast<int>(n));
    s.nodes_of_layer = 0;
    w(nw);
  }
  OnnxExportResult r;
  r.opset = kOpset;
  r.nodes = s.nodes;
  for (const auto& in : out.input()) r.inputs.push_back(in.name());
  for (int v : g.outputs()) {
    onnx::ValueInfoProto* info = out.add_output();
    info->set_name(s.value_names[v]);
    put_shape(*info, g.values[v].shape, o.dynamic_batch);
    r.outputs.push_back(info->name());
  }
  if (out.input_size() == 0) input_error("{}: the graph has no Input layer to become the ONNX model's input", g.source);
  // protobuf refuses messages over 2 GiB; ONNX keeps bigger weights as external data.
  const size_t bytes = model.ByteSizeLong();
  if (bytes > (size_t{1} << 31) - 1)
    input_error("{}: {:.1f} GiB of weights do not fit an ONNX file without external data, which export does not write",
                g.source, bytes / double(1 << 30));
  std::string data;
  if (!model.SerializeToString(&data)) runtime_error("{}: the ONNX model does not serialize", path);
  write_file_atomic(path, data);
  return r;
}

}  // namespace bks
