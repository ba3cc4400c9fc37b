#include "train/weight_fake_quant.h"

#include <algorithm>
#include <cmath>

#include "train/weight_blobs.h"

namespace bks {

void fake_quantize_weights(Tensor& w, bool output_last, float levels) {
  const int64_t all = w.numel();
  if (all == 0) return;
  const int64_t channels = output_last ? w.shape().back() : w.dim(0);
  const int64_t per = all / channels;
  // Element i of channel c: c * per + i, or i * channels + c when the outputs are last.
  const int64_t channel_stride = output_last ? 1 : per, item_stride = output_last ? channels : 1;
  float* p = w.f32();
#pragma omp parallel for
  for (int64_t c = 0; c < channels; ++c) {
    float m = 0.f;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(p[c * channel_stride + i * item_stride]));
    if (!(m > 0.f)) continue;
    const float to_grid = levels / m, from_grid = m / levels;
    for (int64_t i = 0; i < per; ++i) {
      float& x = p[c * channel_stride + i * item_stride];
      x = std::clamp(std::nearbyint(x * to_grid), -levels, levels) * from_grid;
    }
  }
}

WeightFakeQuant::WeightFakeQuant(ParamStore& store, const Net& net, float levels) : store_(store), levels_(levels) {
  for (const WeightBlob& b : weight_blobs(net))
    weights_.push_back({b.param, b.output_last, Tensor(store_.at(b.param).data.shape())});
}

void WeightFakeQuant::quantize() {
  if (quantized_) return;
  for (Weight& w : weights_) {
    Tensor& data = store_.at(w.param).data;
    w.kept.copy_from(data);
    fake_quantize_weights(data, w.output_last, levels_);
  }
  quantized_ = true;
}

void WeightFakeQuant::restore() {
  if (!quantized_) return;
  for (Weight& w : weights_) store_.at(w.param).data.copy_from(w.kept);
  quantized_ = false;
}

}  // namespace bks
