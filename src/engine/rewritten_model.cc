#include "engine/rewritten_model.h"

#include <google/protobuf/text_format.h>

#include <filesystem>
#include <vector>

#include "core/file_io.h"
#include "formats/safetensors.h"

namespace bks {

std::pair<std::string, std::string> write_rewritten_model(const std::string& out, const proto::NetParameter& net,
                                                          const std::map<std::string, Tensor>& weights,
                                                          const std::string& comment, const std::string& model,
                                                          const std::string& source_weights) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  const std::string net_path = (fs::path(out) / "net.prototxt").string();
  const std::string weights_path = (fs::path(out) / "weights.safetensors").string();
  std::string text;
  google::protobuf::TextFormat::PrintToString(net, &text);
  write_file_atomic(net_path, "# " + comment + "\n" + text);
  std::vector<std::pair<std::string, const Tensor*>> blobs;
  for (const auto& [name, t] : weights) blobs.emplace_back(name, &t);
  save_safetensors(weights_path, blobs, {{"source_model", model}, {"source_weights", source_weights}});
  return {net_path, weights_path};
}

}  // namespace bks
