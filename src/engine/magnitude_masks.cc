#include "engine/magnitude_masks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace bks {

namespace {

// The masks keeping the highest scores of `scores` ranked together: exactly
// round(fraction * n) zeros (ties broken by tensor, then position).
std::vector<std::vector<uint8_t>> masks_by_score(const std::vector<std::vector<float>>& scores, double fraction) {
  std::vector<std::vector<uint8_t>> keep;
  int64_t n = 0;
  for (const auto& s : scores) {
    keep.emplace_back(s.size(), 1);
    n += static_cast<int64_t>(s.size());
  }
  int64_t pruned = std::min<int64_t>(n, std::llround(fraction * static_cast<double>(n)));
  if (pruned <= 0) return keep;
  // The pruned-th smallest score: everything below it goes, then scores equal to it in order
  // until the count is exact.
  std::vector<float> all;
  all.reserve(static_cast<size_t>(n));
  for (const auto& s : scores) all.insert(all.end(), s.begin(), s.end());
  std::nth_element(all.begin(), all.begin() + (pruned - 1), all.end());
  const float threshold = all[static_cast<size_t>(pruned - 1)];
  for (size_t k = 0; k < scores.size(); ++k)
    for (size_t i = 0; i < scores[k].size(); ++i)
      if (scores[k][i] < threshold) keep[k][i] = 0, --pruned;
  for (size_t k = 0; k < scores.size() && pruned > 0; ++k)
    for (size_t i = 0; i < scores[k].size() && pruned > 0; ++i)
      if (scores[k][i] == threshold) keep[k][i] = 0, --pruned;
  return keep;
}

std::vector<float> magnitudes(const Tensor& t) {
  std::vector<float> m(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) m[static_cast<size_t>(i)] = std::fabs(t.f32()[i]);
  return m;
}

}  // namespace

std::vector<std::vector<uint8_t>> magnitude_masks(const std::vector<const Tensor*>& w, double fraction) {
  std::vector<std::vector<float>> scores;
  for (const Tensor* t : w) scores.push_back(magnitudes(*t));
  return masks_by_score(scores, fraction);
}

std::vector<uint8_t> magnitude_mask(const Tensor& w, double fraction) { return magnitude_masks({&w}, fraction)[0]; }

std::vector<float> lamp_scores(const Tensor& w) {
  const std::vector<float> m = magnitudes(w);
  std::vector<size_t> order(m.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return m[a] < m[b]; });
  std::vector<float> score(m.size(), 0.f);
  double above = 0;  // sum of w^2 over this weight and every larger one
  for (size_t r = m.size(); r-- > 0;) {
    const double sq = static_cast<double>(m[order[r]]) * m[order[r]];
    above += sq;
    score[order[r]] = above > 0 ? static_cast<float>(sq / above) : 0.f;
  }
  return score;
}

std::vector<std::vector<uint8_t>> lamp_masks(const std::vector<const Tensor*>& w, double fraction) {
  std::vector<std::vector<float>> scores;
  for (const Tensor* t : w) scores.push_back(lamp_scores(*t));
  return masks_by_score(scores, fraction);
}

}  // namespace bks
