#include "engine/bundle.h"

#include <fstream>
#include <set>
#include <string_view>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/sysinfo.h"
#include "formats/graph_json.h"
#include "formats/packed_parts.h"
#include "formats/safetensors.h"
#include "formats/weight_coding.h"
#include "ops/op_def.h"

namespace bks {

namespace {
constexpr const char* kFormatKey = "bakusoku_bundle_version";
constexpr const char* kCodedKey = "coded_weights";        // format 3
constexpr const char* kPackedTensor = "bakusoku_packed";  // format 4
constexpr const char* kRequiresKey = "bakusoku_requires";  // format 5
// What this reader implements of what bundle_requirements can name.
const std::set<std::string> kImplemented = {"int8_average_pooling"};

// A format-5 header's requirements, each one this reader implements.
void check_requirements(const std::map<std::string, std::string>& header, const std::string& path) {
  auto it = header.find(kRequiresKey);
  if (it == header.end()) return;
  std::string_view rest = it->second;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string need(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (!kImplemented.count(need))
      input_error("{}: {}: the bundle needs '{}', which this bakusoku does not implement; upgrade it or deploy again",
                  path, kRequiresKey, need.substr(0, 64));
  }
}

// The coded weights' names and shapes, from the metadata.
std::map<std::string, Shape> coded_shapes(const TensorFile& tf, const std::string& path) {
  std::map<std::string, Shape> out;
  auto it = tf.metadata.find(kCodedKey);
  if (it == tf.metadata.end()) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    input_error("{}: corrupt bundle: {} is not JSON: {}", path, kCodedKey, e.what());
  }
  if (!j.is_object()) input_error("{}: corrupt bundle: {} is not an object", path, kCodedKey);
  for (auto& [name, dims] : j.items()) {
    if (!dims.is_array()) input_error("{}: corrupt bundle: {} '{}' is not a shape", path, kCodedKey, name);
    Shape s;
    for (auto& d : dims) {
      if (!d.is_number_integer()) input_error("{}: corrupt bundle: {} '{}' is not a shape", path, kCodedKey, name);
      s.push_back(d.get<int64_t>());
    }
    out[name] = s;
  }
  return out;
}
// A coded tensor can decode to thousands of times its bytes (an all-zero mask deflates
// that well), so a small crafted bundle could ask for more memory than the machine has,
// one tensor at a time: the shapes' sum is checked before anything decodes.
void check_coded_fit_memory(const std::map<std::string, std::pair<Shape, Tensor>>& coded, const std::string& path) {
  double bytes = 0;
  for (const auto& [name, shape_bytes] : coded) {
    const Shape& shape = shape_bytes.first;
    const std::string problem = shape_problem(shape, sizeof(float));
    if (!problem.empty()) input_error("{}: corrupt bundle: coded tensor '{}': {}", path, name, problem);
    bytes += static_cast<double>(shape_numel(shape)) * sizeof(float);
  }
  const double memory = physical_memory_bytes();
  if (memory > 0 && bytes > memory)
    input_error("{}: corrupt bundle: its coded weights would decode to {:.1f} GB, more than this machine's {:.1f} GB",
                path, bytes / 1e9, memory / 1e9);
}
}  // namespace

void set_input_batch(Graph& g, int64_t batch) {
  for (Node& n : g.nodes)
    if (op_traits(n).external_input) set_external_input_batch(n, batch);
}

std::vector<std::string> bundle_requirements(const Graph& g) {
  std::set<std::string> needs;
  for (const Node& n : g.nodes)
    if (op_traits(n).averages_int8 && n.deploy.int8_input_threshold > 0.f) needs.insert("int8_average_pooling");
  return {needs.begin(), needs.end()};
}

void save_bundle(const std::string& path, const Bundle& b) {
  std::map<std::string, std::string> meta = b.info;
  meta.erase(kRequiresKey);
  meta["graph"] = graph_to_json(b.graph);
  // The header: the format (the oldest that holds what the graph needs) and its requirements.
  const std::vector<std::string> needs = bundle_requirements(b.graph);
  std::map<std::string, std::string> header = {{kFormatKey, std::to_string(b.coded.empty() ? 2 : 4)}};
  if (!needs.empty()) header = {{kFormatKey, "5"}, {kRequiresKey, fmt::format("{}", fmt::join(needs, ","))}};
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  if (b.coded.empty()) {
    meta.insert(header.begin(), header.end());
    for (auto& [name, t] : b.weights) tensors.emplace_back(name, &t);
    save_safetensors(path, tensors, meta);
    return;
  }
  // Format 4: the metadata and the coded weights packed into one tensor; any weight not
  // coded stays a plain tensor beside it.
  PackedParts parts;
  parts.strings = std::move(meta);
  for (auto& [name, t] : b.weights) {
    auto coded = b.coded.find(name);
    if (coded == b.coded.end())
      tensors.emplace_back(name, &t);
    else
      parts.blobs.push_back({name, t.shape(), std::string(coded->second.data<char>(), coded->second.bytes())});
  }
  BKS_CHECK(parts.blobs.size() == b.coded.size(), "coded weights without a tensor in the bundle");
  const std::string packed = pack_parts(parts);
  Tensor bytes({static_cast<int64_t>(packed.size())}, DType::u8);
  std::copy(packed.begin(), packed.end(), bytes.data<char>());
  tensors.emplace_back(kPackedTensor, &bytes);
  save_safetensors(path, tensors, header);
}

bool is_bundle_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[4096] = {};
  f.read(head, sizeof head);
  return std::string(head, static_cast<size_t>(f.gcount())).find(kFormatKey) != std::string::npos;
}

Bundle load_bundle(const std::string& path) {
  TensorFile tf = load_safetensors(path);
  auto it = tf.metadata.find(kFormatKey);
  if (it == tf.metadata.end()) input_error("{}: not a bakusoku bundle (no {} in its header)", path, kFormatKey);
  int version = 0;
  try {
    version = std::stoi(it->second);
  } catch (const std::exception&) {
    input_error("{}: corrupt bundle: format version '{}' is not a number", path, it->second);
  }
  if (version > kBundleVersion)
    input_error("{}: bundle format version {} is newer than this bakusoku reads ({}); deploy it again or upgrade", path,
                version, kBundleVersion);
  if (version == 1)
    input_error(
        "{}: bundle format version 1 (an earlier bakusoku's) is no longer read (this one reads {}); run "
        "`bakusoku deploy` on the model again",
        path, kBundleVersion);
  if (version < 1) input_error("{}: corrupt bundle: format version {}", path, version);
  if (version >= 5) check_requirements(tf.metadata, path);
  // Format 5 is laid out as 4 when it holds the packed tensor, else as 2.
  const bool packed_layout = version == 4 || (version >= 5 && tf.find(kPackedTensor));
  // The metadata and the coded weights (name: shape and bytes).
  std::map<std::string, std::string> meta = tf.metadata;
  std::map<std::string, std::pair<Shape, Tensor>> coded;
  if (packed_layout) {
    const Tensor* packed = tf.find(kPackedTensor);
    if (!packed || packed->dtype() != DType::u8 || packed->ndim() != 1)
      input_error("{}: corrupt bundle: no {} U8 tensor", path, kPackedTensor);
    PackedParts parts = unpack_parts(std::string_view(packed->data<char>(), packed->bytes()), path);
    meta = std::move(parts.strings);
    for (PackedBlob& blob : parts.blobs) {
      Tensor t({static_cast<int64_t>(blob.bytes.size())}, DType::u8);
      std::copy(blob.bytes.begin(), blob.bytes.end(), t.data<char>());
      if (!coded.emplace(blob.name, std::pair{blob.shape, t}).second)
        input_error("{}: corrupt bundle: coded tensor '{}' twice", path, blob.name);
    }
  } else {
    for (auto& [name, shape] : coded_shapes(tf, path)) {
      const Tensor* t = tf.find(name);
      if (!t) input_error("{}: corrupt bundle: {} names '{}', which it does not hold", path, kCodedKey, name);
      coded[name] = {shape, *t};
    }
  }
  Bundle b;
  auto graph = meta.find("graph");
  if (graph == meta.end()) input_error("{}: corrupt bundle: no graph in its header", path);
  b.graph = graph_from_json(graph->second, path);
  for (auto& [k, v] : meta)
    if (k != "graph" && k != kFormatKey && k != kCodedKey && k != kRequiresKey) b.info[k] = v;
  check_coded_fit_memory(coded, path);
  // The plain weights: in format 4 every tensor beside the packed one; in format 3 those
  // that are not coded bytes.
  for (auto& [name, t] : tf.tensors)
    if (packed_layout ? name != kPackedTensor : !coded.count(name)) b.weights[name] = t;
  for (auto& [name, shape_bytes] : coded) {
    const auto& [shape, t] = shape_bytes;
    const std::string what = fmt::format("{}: tensor '{}'", path, name);
    if (t.dtype() != DType::u8 || t.ndim() != 1)
      input_error("{}: corrupt bundle: a coded tensor must be U8 bytes, not {} {}", what, dtype_name(t.dtype()),
                  shape_str(t.shape()));
    if (b.weights.count(name)) input_error("{}: corrupt bundle: stored both coded and plain", what);
    b.weights[name] = decode_weights(std::string_view(t.data<char>(), t.bytes()), shape, DType::f32, what);
    b.coded[name] = t;
  }
  return b;
}

}  // namespace bks
