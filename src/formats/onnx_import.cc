#include "formats/onnx_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include "formats/onnx_ops.h"

namespace bks {
namespace onnx_import {

namespace {

std::map<std::string, Translator>& registry() {
  static std::map<std::string, Translator> r;
  return r;
}

}  // namespace

bool register_onnx_op(const char* type, Translator fn) {
  registry()[type] = fn;
  return true;
}

Translator find_onnx_op(const std::string& type) {
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : it->second;
}

int norm_axis(const NodeCtx& c, int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) input_error("{}: axis {} is outside a rank-{} tensor", c.where(), axis, r);
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

Shape broadcast_shape(const NodeCtx& c, const Shape& a, const Shape& b) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd, 1);
  for (size_t k = 0; k < nd; ++k) {
    const int64_t x = k + a.size() < nd ? 1 : a[k + a.size() - nd];
    const int64_t y = k + b.size() < nd ? 1 : b[k + b.size() - nd];
    if (x != y && x != 1 && y != 1)
      input_error("{}: [{}] and [{}] do not broadcast", c.where(), fmt::join(a, ","), fmt::join(b, ","));
    out[k] = x == 1 ? y : x;
  }
  return out;
}

NodeCtx::NodeCtx(ImportState& s, const onnx::NodeProto& n, std::string name)
    : s_(s), n_(n), name_(std::move(name)), where_(fmt::format("{}: node '{}' ({})", s.file, name_, n.op_type())) {}

int NodeCtx::num_inputs() const { return n_.input_size(); }
bool NodeCtx::has_input(int i) const { return i < n_.input_size() && !n_.input(i).empty(); }

const Val& NodeCtx::in(int i) const {
  const Val& v = in_padded(i);
  if (v.padded())
    input_error("{}: input '{}' comes from a Pad with non-zero pads, which only a Conv or an AveragePool can take up",
                where_, n_.input(i));
  return v;
}

const Val& NodeCtx::in_padded(int i) const {
  if (!has_input(i)) input_error("{}: input {} is missing", where_, i);
  auto it = s_.values.find(n_.input(i));
  if (it == s_.values.end())
    input_error("{}: input '{}' is not produced by any earlier node, initializer or graph input", where_, n_.input(i));
  return it->second;
}

const Const& NodeCtx::const_in(int i) const {
  const Val& v = in(i);
  if (!v.constant)
    input_error("{}: input {} ('{}') must be a constant (an initializer, or computed from constants and shapes)",
                where_, i, n_.input(i));
  return *v.constant;
}

const onnx::AttributeProto* NodeCtx::attr(const char* name) const {
  for (const auto& a : n_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t NodeCtx::attr_int(const char* name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INT) input_error("{}: attribute '{}' must be an int", where_, name);
  return a->i();
}

float NodeCtx::attr_float(const char* name, float def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::FLOAT) input_error("{}: attribute '{}' must be a float", where_, name);
  return a->f();
}

std::vector<int64_t> NodeCtx::attr_ints(const char* name, std::vector<int64_t> def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INTS) input_error("{}: attribute '{}' must be a list of ints", where_, name);
  return {a->ints().begin(), a->ints().end()};
}

std::string NodeCtx::attr_string(const char* name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::STRING) input_error("{}: attribute '{}' must be a string", where_, name);
  return a->s();
}

int NodeCtx::num_outputs() const { return n_.output_size(); }
bool NodeCtx::has_output(int i) const { return i < n_.output_size() && !n_.output(i).empty(); }

std::string NodeCtx::out_name(int i) const {
  if (i >= n_.output_size() || n_.output(i).empty()) input_error("{}: output {} is missing", where_, i);
  return n_.output(i);
}

void NodeCtx::set_const(int i, Const c) {
  // Each fold is limited to 2^24 values, but many nodes each folding that much from a few
  // small inputs (a Gather repeating its indices) could still exhaust memory from a tiny file.
  constexpr int64_t kMaxConstValues = int64_t{1} << 27;
  s_.const_values += shape_numel(c.shape);
  if (s_.const_values > kMaxConstValues)
    input_error("{}: constants computed at import would exceed 2^27 values in all", where_);
  Val v;
  v.shape = c.shape;
  v.constant = std::make_shared<const Const>(std::move(c));
  s_.values[out_name(i)] = std::move(v);
}

void NodeCtx::alias(int i, const Val& v) { s_.values[out_name(i)] = v; }

proto::LayerParameter& NodeCtx::add_layer(const std::string& type, const std::vector<std::string>& bottoms,
                                          const std::string& top, const std::string& suffix) {
  proto::LayerParameter* l = s_.net->param.add_layer();
  l->set_name(s_.layer_names.take(name_ + suffix));
  l->set_type(type);
  for (const auto& b : bottoms) l->add_bottom(b);
  l->add_top(top);
  return *l;
}

void NodeCtx::set_output(int i, Shape shape) {
  for (int64_t d : shape)
    if (d <= 0) input_error("{}: output '{}' would have shape [{}]", where_, out_name(i), fmt::join(shape, ","));
  check_shape(shape, 4, fmt::format("{}: output '{}'", where_, out_name(i)));
  Val v;
  v.shape = std::move(shape);
  v.blob = out_name(i);
  s_.values[v.blob] = std::move(v);
}

void NodeCtx::add_param(const proto::LayerParameter& l, Tensor t) {
  int& k = s_.blob_count[l.name()];
  s_.net->weights[fmt::format("{}.{}", l.name(), k++)] = std::move(t);
}

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) input_error("{}: model file not found", path);
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f) input_error("{}: cannot read the model file", path);
  return ss.str();
}

int default_opset(const onnx::ModelProto& m, const std::string& path) {
  int opset = -1;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(o.version());
  if (opset < 0) input_error("{}: the model imports no opset of the default ONNX domain", path);
  if (opset < 11 || opset > 18)
    input_error("{}: opset {} is not supported (bakusoku imports ONNX opsets 11 to 18)", path, opset);
  return opset;
}

// A graph input's shape: the model's, a dynamic batch dimension as 1, or `given`.
Shape input_shape(const onnx::ValueInfoProto& vi, const std::string& path, const Shape& given) {
  const auto& tt = vi.type().tensor_type();
  if (!vi.type().has_tensor_type() || tt.elem_type() != onnx::TensorProto::FLOAT)
    input_error("{}: graph input '{}' is not a float tensor", path, vi.name());
  if (!given.empty()) return given;
  if (!tt.has_shape()) input_error("{}: graph input '{}' has no shape; give --input-shape", path, vi.name());
  Shape s;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() > 0) {
      s.push_back(dim.dim_value());
    } else if (d == 0) {
      s.push_back(1);
    } else {
      input_error("{}: graph input '{}' has dynamic dimension {} ('{}'); give --input-shape", path, vi.name(), d,
                  dim.dim_param());
    }
  }
  return s;
}

}  // namespace
}  // namespace onnx_import

bool is_onnx_file(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

NetLoad import_onnx(const std::string& path, const Shape& given_shape) {
  using namespace onnx_import;
  const std::string bytes = read_file(path);
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    input_error("{}: not a readable ONNX model (the protobuf does not parse: a truncated or foreign file)", path);
  if (!model.has_graph() || model.graph().node_size() == 0) input_error("{}: the ONNX model has no graph nodes", path);
  NetLoad net;
  net.source = path;
  ImportState s;
  s.file = path;
  s.model_dir = std::filesystem::path(path).parent_path().string();
  s.opset = default_opset(model, path);
  s.net = &net;
  const onnx::GraphProto& g = model.graph();
  net.param.set_name(g.name());

  for (const auto& t : g.initializer()) {
    Val v;
    auto c = std::make_shared<Const>(read_tensor(t, fmt::format("{}: initializer '{}'", path, t.name()), s.model_dir));
    v.shape = c->shape;
    v.constant = std::move(c);
    s.values[t.name()] = std::move(v);
  }
  int inputs = 0;
  for (const auto& vi : g.input()) inputs += s.values.count(vi.name()) ? 0 : 1;
  if (!given_shape.empty() && inputs != 1)
    input_error("{}: --input-shape is for a model with one input; this one has {}", path, inputs);
  for (const auto& vi : g.input()) {
    if (s.values.count(vi.name())) continue;  // an initializer listed as an input (older exports)
    Shape shape = input_shape(vi, path, given_shape);
    check_shape(shape, 4, fmt::format("{}: graph input '{}'", path, vi.name()));
    proto::LayerParameter* l = net.param.add_layer();
    l->set_name(vi.name());
    l->set_type("Input");
    l->add_top(vi.name());
    auto* bs = l->mutable_input_param()->add_shape();
    for (int64_t d : shape) bs->add_dim(d);
    s.layer_names.reserve(vi.name());
    s.values[vi.name()] = Val{shape, vi.name(), nullptr};
  }

  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    std::string name = n.name().empty() ? fmt::format("{}_{}", n.op_type(), i) : n.name();
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    Translator fn = default_domain ? find_onnx_op(n.op_type()) : nullptr;
    if (!fn)
      input_error("{}: node '{}' has operator {}{} (opset {}), which the ONNX importer does not support", path, name,
                  default_domain ? "" : n.domain() + "::", n.op_type(), s.opset);
    NodeCtx c(s, n, name);
    fn(c);
  }
  for (const auto& o : g.output()) {
    auto it = s.values.find(o.name());
    if (it == s.values.end()) input_error("{}: graph output '{}' is not produced by any node", path, o.name());
    if (it->second.constant) input_error("{}: graph output '{}' is a constant; nothing computes it", path, o.name());
  }
  return net;
}

}  // namespace bks
