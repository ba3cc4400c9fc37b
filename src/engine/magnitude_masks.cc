#include "engine/magnitude_masks.h"

#include <algorithm>
#include <cmath>

namespace bks {

std::vector<std::vector<uint8_t>> magnitude_masks(const std::vector<const Tensor*>& w, double fraction) {
  std::vector<std::vector<uint8_t>> keep;
  int64_t n = 0;
  for (const Tensor* t : w) {
    keep.emplace_back(static_cast<size_t>(t->numel()), 1);
    n += t->numel();
  }
  int64_t pruned = std::min<int64_t>(n, std::llround(fraction * static_cast<double>(n)));
  if (pruned <= 0) return keep;
  // The magnitude of the pruned-th smallest weight: everything below it goes, then weights
  // equal to it in order until the count is exact.
  std::vector<float> mags;
  mags.reserve(static_cast<size_t>(n));
  for (const Tensor* t : w)
    for (int64_t i = 0; i < t->numel(); ++i) mags.push_back(std::fabs(t->f32()[i]));
  std::nth_element(mags.begin(), mags.begin() + (pruned - 1), mags.end());
  const float threshold = mags[static_cast<size_t>(pruned - 1)];
  for (size_t k = 0; k < w.size(); ++k)
    for (int64_t i = 0; i < w[k]->numel(); ++i)
      if (std::fabs(w[k]->f32()[i]) < threshold) keep[k][static_cast<size_t>(i)] = 0, --pruned;
  for (size_t k = 0; k < w.size() && pruned > 0; ++k)
    for (int64_t i = 0; i < w[k]->numel() && pruned > 0; ++i)
      if (std::fabs(w[k]->f32()[i]) == threshold) keep[k][static_cast<size_t>(i)] = 0, --pruned;
  return keep;
}

std::vector<uint8_t> magnitude_mask(const Tensor& w, double fraction) { return magnitude_masks({&w}, fraction)[0]; }

}  // namespace bks
