// A running "worst difference" that a NaN reaches: std::max(worst, NaN) keeps worst (every
// comparison with NaN is false), so an output of NaNs would pass any bound on the worst.
#pragma once

namespace bks::test {

// The larger of `worst` and `d`, or `d` when it is NaN.
inline double worse(double worst, double d) { return d <= worst ? worst : d; }

}  // namespace bks::test
