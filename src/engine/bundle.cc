#include "engine/bundle.h"

#include <fstream>

#include "core/error.h"
#include "formats/graph_json.h"
#include "formats/safetensors.h"
#include "ops/op_def.h"

namespace bks {

namespace {
constexpr const char* kFormatKey = "bakusoku_bundle_version";
}

void set_input_batch(Graph& g, int64_t batch) {
  for (Node& n : g.nodes)
    if (op_traits(n).external_input) set_external_input_batch(n, batch);
}

void save_bundle(const std::string& path, const Bundle& b) {
  std::map<std::string, std::string> meta = b.info;
  meta[kFormatKey] = std::to_string(kBundleVersion);
  meta["graph"] = graph_to_json(b.graph);
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (auto& [name, t] : b.weights) tensors.emplace_back(name, &t);
  save_safetensors(path, tensors, meta);
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
  Bundle b;
  auto graph = tf.metadata.find("graph");
  if (graph == tf.metadata.end()) input_error("{}: corrupt bundle: no graph in its header", path);
  b.graph = graph_from_json(graph->second, path);
  for (auto& [k, v] : tf.metadata)
    if (k != "graph" && k != kFormatKey) b.info[k] = v;
  for (auto& [name, t] : tf.tensors) b.weights[name] = t;
  return b;
}

}  // namespace bks
