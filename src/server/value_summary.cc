#include "server/value_summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace bks::server {

json value_stats(const float* p, int64_t n) {
  double sum = 0, sq = 0;
  float lo = INFINITY, hi = -INFINITY;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
    ++finite;
  }
  if (finite == 0) return {{"mean", nullptr}, {"std", nullptr}, {"min", nullptr}, {"max", nullptr}};
  const double count = static_cast<double>(finite), mean = sum / count;
  return {{"mean", mean}, {"std", std::sqrt(std::max(0.0, sq / count - mean * mean))}, {"min", lo}, {"max", hi}};
}

json value_histogram(const float* p, int64_t n) {
  if (n == 0) return nullptr;
  float lo = INFINITY, hi = -INFINITY;
  int64_t non_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) {
      ++non_finite;
      continue;
    }
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  if (non_finite == n) lo = hi = 0.f;
  std::vector<int64_t> counts(kHistogramBins, 0);
  // In double: hi - lo may overflow a float (-3e38 .. 3e38).
  const double width = static_cast<double>(hi) - lo;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    int64_t bin = width > 0 ? static_cast<int64_t>((p[i] - static_cast<double>(lo)) / width * kHistogramBins) : 0;
    ++counts[static_cast<size_t>(std::min<int64_t>(bin, kHistogramBins - 1))];
  }
  return {{"lo", lo}, {"hi", hi}, {"counts", counts}, {"non_finite", non_finite}};
}

}  // namespace bks::server
