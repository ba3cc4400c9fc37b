#include "engine/quantize.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/precision.h"
#include "ops/op_def.h"

namespace bks {

namespace {

constexpr int64_t kFewChannelsForInt8 = 4;

bool is_int8_layer(const proto::LayerParameter& l) {
  return op_traits(l).weighted_linear && l.int8_input_threshold() > 0.f;
}

struct Readers {
  std::map<std::string, int> producers;                             // by blob name
  std::map<std::string, std::vector<std::pair<int, int>>> readers;  // (layer, bottom index)
};

// The threshold every reader of `blob` quantizes it with, when all of them are int8
// layers (or MAX poolings whose outputs qualify in turn) and agree; none otherwise.
std::optional<float> int8_readers_threshold(const proto::NetParameter& net, const Readers& r, const std::string& blob) {
  auto p = r.producers.find(blob);
  auto rd = r.readers.find(blob);
  // Rewritten in place, or an output of the net: stays f32.
  if (p == r.producers.end() || p->second < 0 || rd == r.readers.end()) return std::nullopt;
  std::optional<float> t;
  for (auto [li, bi] : rd->second) {
    const proto::LayerParameter& l = net.layer(li);
    std::optional<float> mine;
    if (is_int8_layer(l) && bi == 0) {
      mine = l.int8_input_threshold();
    } else if (op_traits(l).max_pooling && l.top_size() == 1 && l.top(0) != blob) {
      mine = int8_readers_threshold(net, r, l.top(0));
    }
    if (!mine || (t && *t != *mine)) return std::nullopt;
    t = mine;
  }
  return t;
}

}  // namespace

int keep_int8_between_layers(proto::NetParameter& net) {
  Readers r;
  for (int i = 0; i < net.layer_size(); ++i) {
    const auto& l = net.layer(i);
    for (int b = 0; b < l.bottom_size(); ++b) r.readers[l.bottom(b)].push_back({i, b});
    for (const auto& top : l.top()) {
      auto [it, fresh] = r.producers.emplace(top, i);
      if (!fresh) it->second = -1;  // written twice (in place)
    }
  }
  int n = 0;
  for (auto& l : *net.mutable_layer()) {
    l.clear_int8_output_threshold();
    // A fused residual sum adds f32 values; such a layer writes f32.
    if (!is_int8_layer(l) || l.top_size() != 1 || l.fusion_param().residual_sum()) continue;
    if (auto t = int8_readers_threshold(net, r, l.top(0))) {
      l.set_int8_output_threshold(*t);
      ++n;
    }
  }
  return n;
}

Int8Plan quantize_int8(Bundle& b, const CalibrationTable& t, const std::map<std::string, Shape>& shapes) {
  Int8Plan plan;
  for (auto& l : *b.net.mutable_layer()) {
    const OpTraits tr = op_traits(l);
    if (!tr.weighted_linear || l.bottom_size() == 0) continue;
    // First layers (a grey or RGB image): oneDNN 2.6's int8 kernels there are slower than
    // its f32 one (LeNet conv1, batch 256: 1.1-1.8 ms vs 0.77 ms on AVX-512 VNNI).
    auto s = shapes.find(l.bottom(0));
    if (tr.convolution && s != shapes.end() && s->second.size() == 4 && s->second[1] < kFewChannelsForInt8) continue;
    auto it = t.threshold.find(l.bottom(0));
    if (it == t.threshold.end() || it->second <= 0) continue;
    l.set_int8_input_threshold(static_cast<float>(it->second));
    ++plan.quantized;
  }
  plan.int8_outputs = keep_int8_between_layers(b.net);
  b.info["precision"] = precision_name(Precision::int8);
  return plan;
}

}  // namespace bks
