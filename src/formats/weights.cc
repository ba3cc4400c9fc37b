#include "formats/weights.h"

#include <algorithm>
#include <cstring>

#include "caffe.pb.h"
#include "core/file_io.h"
#include "core/log.h"
#include "formats/caffe_upgrade.h"
#include "formats/safetensors.h"

namespace bks {
namespace {

TensorFile read_caffemodel(const std::string& path) {
  proto::NetParameter net;
  read_binary_proto(path, net);
  if (NetFormat f = upgrade_net(net, path); f != NetFormat::current)
    log::info(
        "{}: a .caffemodel in Caffe's {} format, upgraded on load (`bakusoku upgrade_net_proto_binary {} "
        "NEW.caffemodel` writes the current format)",
        path, net_format_name(f), path);
  TensorFile tf;
  for (auto& layer : net.layer())
    for (int i = 0; i < layer.blobs_size(); ++i) {
      const auto& b = layer.blobs(i);
      Shape s;
      if (b.has_shape())
        s.assign(b.shape().dim().begin(), b.shape().dim().end());
      else
        s = {b.num(), b.channels(), b.height(), b.width()};
      // The shape is the file's claim: check it against the values the file holds before
      // allocating anything of that size.
      if (std::string problem = shape_problem(s, sizeof(float)); !problem.empty())
        input_error("{}: layer '{}' blob {}: {}", path, layer.name(), i, problem);
      const int64_t n = shape_numel(s);
      const bool floats = b.data_size() == n;
      if (!floats && b.double_data_size() != n)
        input_error("{}: layer '{}' blob {} holds {} values for shape {}", path, layer.name(), i,
                    std::max(b.data_size(), b.double_data_size()), shape_str(s));
      Tensor t(s);
      if (floats && n > 0)  // an empty blob's data pointer may be null, which memcpy must not get
        std::memcpy(t.f32(), b.data().data(), t.bytes());
      else if (!floats)
        for (int64_t k = 0; k < n; ++k) t.f32()[k] = static_cast<float>(b.double_data(static_cast<int>(k)));
      tf.tensors.emplace_back(fmt::format("{}.{}", layer.name(), i), std::move(t));
    }
  return tf;
}

}  // namespace

void save_weights(const std::string& path, const ParamStore& store,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (auto& p : store.all()) list.emplace_back(p.key, &p.data);
  std::map<std::string, std::string> m = metadata;
  m["format"] = "bakusoku-weights";
  save_safetensors(path, list, m);
}

int load_weights(const std::string& path, ParamStore& store, bool reinit_mismatched) {
  FileKind kind = detect_file_kind(path);
  if (kind == FileKind::missing) input_error("{}: weights file not found", path);
  TensorFile tf;
  bool caffemodel = path.size() > 11 && path.substr(path.size() - 11) == ".caffemodel";
  tf = caffemodel ? read_caffemodel(path) : load_safetensors(path);
  int loaded = 0;
  std::vector<std::string> missing;
  for (auto& p : store.all()) {
    const Tensor* t = tf.find(p.key);
    if (!t) {
      missing.push_back(p.key);
      continue;
    }
    if (t->dtype() != DType::f32)
      input_error("{}: tensor '{}' is {}, expected F32", path, p.key, dtype_name(t->dtype()));
    if (t->shape() != p.data.shape() && t->numel() == p.data.numel() && caffemodel) {
      p.data.copy_from(*t);  // old caffemodels store 4-d shapes for 1-d/2-d blobs
    } else if (t->shape() != p.data.shape() && reinit_mismatched) {
      log::warn("{}: tensor '{}' has shape {} but the net expects {}: it keeps its initial values", path, p.key,
                shape_str(t->shape()), shape_str(p.data.shape()));
      continue;
    } else if (t->shape() != p.data.shape()) {
      input_error("{}: tensor '{}' has shape {} but the net expects {}", path, p.key, shape_str(t->shape()),
                  shape_str(p.data.shape()));
    } else {
      p.data.copy_from(*t);
    }
    ++loaded;
  }
  if (!store.all().empty() && loaded == 0)
    input_error("{}: none of the net's {} parameter blobs are in this file (the first is '{}'; it holds {} tensors)",
                path, store.all().size(), store.all().front().key, tf.tensors.size());
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 6);
    log::warn("{}: {} of the net's {} parameter blobs are not in this file and keep their initial values: {}{}", path,
              missing.size(), store.all().size(), fmt::join(missing.begin(), missing.begin() + shown, ", "),
              missing.size() > shown ? ", ..." : "");
  }
  return loaded;
}

int load_weights(const std::map<std::string, Tensor>& blobs, ParamStore& store, const std::string& source) {
  for (auto& p : store.all()) {
    auto it = blobs.find(p.key);
    if (it == blobs.end()) input_error("{}: the model holds no blob '{}'", source, p.key);
    if (it->second.shape() != p.data.shape())
      input_error("{}: blob '{}' has shape {} but the layer expects {}", source, p.key, shape_str(it->second.shape()),
                  shape_str(p.data.shape()));
    p.data.copy_from(it->second);
  }
  return store.size();
}

}  // namespace bks
