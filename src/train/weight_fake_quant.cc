#include "train/weight_fake_quant.h"

#include "train/weight_blobs.h"

namespace bks {

WeightFakeQuant::WeightFakeQuant(ParamStore& store, const Net& net, WeightGrid grid, float levels, bool float_ends)
    : store_(store), grid_(grid), levels_(levels) {
  const std::vector<WeightBlob> blobs = weight_blobs(net);
  for (size_t i = 0; i < blobs.size(); ++i) {
    const WeightBlob& b = blobs[i];
    if (float_ends && blobs.size() > 2 && (i == 0 || i + 1 == blobs.size()))
      float_keys_.push_back(store_.at(b.param).key);
    else
      weights_.push_back({b.param, b.output_last, Tensor(store_.at(b.param).data.shape())});
  }
}

void WeightFakeQuant::quantize() {
  if (quantized_) return;
  for (Weight& w : weights_) {
    Tensor& data = store_.at(w.param).data;
    w.kept.copy_from(data);
    round_to_grid(data, w.output_last, grid_, levels_);
  }
  quantized_ = true;
}

void WeightFakeQuant::restore() {
  if (!quantized_) return;
  for (Weight& w : weights_) store_.at(w.param).data.copy_from(w.kept);
  quantized_ = false;
}

}  // namespace bks
