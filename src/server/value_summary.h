// Summaries of a blob for the dashboard's layer visualisation: statistics and a histogram
// (as DIGITS showed), small whatever the blob's size. NaN and infinities are counted apart
// and left out of both, so one overflow does not hide the shape of the rest.
#pragma once

#include <cstdint>

#include "server/store.h"

namespace bks::server {

constexpr int kHistogramBins = 32;

// {mean, std, min, max} of the finite values (each null when there are none).
json value_stats(const float* p, int64_t n);
// {lo, hi, counts: [kHistogramBins], non_finite}: equal bins over [lo, hi] = [min, max] of
// the finite values, the top edge in the last bin; a constant blob has all of them in the
// first (lo == hi), one with no finite value lo = hi = 0 and no counts. Null when n is 0.
json value_histogram(const float* p, int64_t n);

}  // namespace bks::server
