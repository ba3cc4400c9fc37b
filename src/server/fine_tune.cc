#include "server/fine_tune.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "formats/caffe_net.h"
#include "ops/shape_inference.h"
#include "runtime/param_binding.h"
#include "server/datasets.h"
#include "server/http.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxLrMults = 100;

}  // namespace

std::string fine_tune_file_name(const std::string& source) {
  return fs::path(source).extension() == ".caffemodel" ? "init.caffemodel" : "init.safetensors";
}

std::string fine_tune_weights(Context& c, const nlohmann::json& from, const std::vector<std::string>& roots) {
  if (!from.is_object())
    throw ApiError(400, "weights_from", "'weights_from' must be {\"job_id\": ID, \"iter\": N} or {\"file\": PATH}");
  if (from.contains("file")) {
    const std::string path = string_field(from, "file", true, 4096);
    const std::string ext = fs::path(path).extension().string();
    if (ext != ".safetensors" && ext != ".caffemodel")
      throw ApiError(400, "weights_from",
                     fmt::format("'weights_from': {} is not a .safetensors or .caffemodel file", path));
    try {
      return import_file(path, roots, "weights file").string();
    } catch (const InputError& e) {
      throw ApiError(400, "weights_from", e.what());
    }
  }
  const int64_t job_id = integer_field(from, "job_id", 1, INT64_MAX, 0);
  const int64_t iter = integer_field(from, "iter", 0, INT64_MAX, -1);
  if (job_id == 0 || iter < 0)
    throw ApiError(400, "weights_from", "'weights_from' needs the source job's 'job_id' and the snapshot's 'iter'");
  auto job = c.store.get("jobs", job_id);
  if (!job || job->value("kind", "") != "train")
    throw ApiError(400, "weights_from", fmt::format("'weights_from': there is no training job {}", job_id));
  for (const auto& [at, path] : snapshot_files((fs::path(c.scheduler.job_dir(job_id)) / "run").string(), "safetensors"))
    if (at == iter) return path;
  throw ApiError(400, "weights_from",
                 fmt::format("'weights_from': job {} has no snapshot at iteration {}", job_id, iter));
}

nlohmann::json lr_mult_field(const nlohmann::json& body) {
  if (!body.contains("lr_mult") || body["lr_mult"].is_null()) return nlohmann::json::object();
  const nlohmann::json& m = body["lr_mult"];
  if (!m.is_object()) throw ApiError(400, "lr_mult", "'lr_mult' must be an object {\"layer\": multiplier}");
  if (m.size() > kMaxLrMults)
    throw ApiError(400, "lr_mult", fmt::format("'lr_mult' names at most {} layers", kMaxLrMults));
  for (const auto& [name, v] : m.items())
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1000)
      throw ApiError(400, "lr_mult", fmt::format("'lr_mult': layer '{}' needs a multiplier from 0 to 1000", name));
  return m;
}

std::string with_lr_mults(const std::string& net_text, const nlohmann::json& mults) {
  if (mults.empty()) return net_text;
  NetLoad nl = parse_net_text(net_text, "net.prototxt");
  // How many blobs each layer learns, from the training graph as the trainer binds it.
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  Graph g = build_caffe_graph(nl, st);
  infer_shapes(g, proto::TRAIN);
  const ParamDecls decls = declared_params(g, proto::TRAIN);
  std::map<std::string, size_t> blobs;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) blobs[g.nodes[n].name] = decls(n).size();
  for (const auto& [name, v] : mults.items()) {
    auto it = blobs.find(name);
    if (it == blobs.end())
      throw ApiError(400, "lr_mult", fmt::format("'lr_mult': the network has no layer '{}'", name));
    if (it->second == 0)
      throw ApiError(400, "lr_mult", fmt::format("'lr_mult': layer '{}' has no weights to train", name));
  }
  for (auto& layer : *nl.param.mutable_layer()) {
    auto m = mults.find(layer.name());
    if (m == mults.end()) continue;
    const size_t n = blobs[layer.name()];
    while (static_cast<size_t>(layer.param_size()) < n) layer.add_param();
    for (auto& spec : *layer.mutable_param()) spec.set_lr_mult(m->get<float>());
  }
  std::string out;
  google::protobuf::TextFormat::PrintToString(nl.param, &out);
  return out;
}

}  // namespace bks::server
