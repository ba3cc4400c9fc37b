// A running "worst difference" that a NaN reaches and keeps: std::max(worst, NaN) keeps
// worst (every comparison with NaN is false), so an output of NaNs would pass any bound on
// the worst. Used wherever two outputs are compared (max_relative_difference, tests).
#pragma once

#include <cmath>

namespace bks {

// The larger of `worst` and `d`; NaN once either is NaN.
inline double worse(double worst, double d) { return (std::isnan(d) || d > worst) ? d : worst; }

}  // namespace bks
