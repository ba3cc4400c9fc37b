// exp, logistic, tanh and erf in plain arithmetic that compilers vectorise. glibc's expf and
// tanhf are calls, one element at a time: they took a third of an LSTM step at batch 1.
// exp: range reduction to |r| <= ln2 / 2 and a degree-6 polynomial (relative error about
// 2e-7 over the float range, clamped outside it); tanh near zero: its odd series, where
// 1 - 2 / (e^2x + 1) would cancel.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace bks {

inline float exp_vec(float x) {
  // Written so that GCC 12 vectorises it under `omp simd`: no std::min/max (their reference
  // arguments become per-lane arrays) and no floor (a call unless -fno-trapping-math).
  x = x < -87.3f ? -87.3f : x;  // 2^n stays a normal float
  x = x > 88.3f ? 88.3f : x;
  // n = x / ln2 rounded to the nearest integer: adding and subtracting 1.5 * 2^23 leaves
  // no fraction bits in a float.
  constexpr float kRound = 12582912.f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-6f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

inline float logistic_vec(float x) { return 1.f / (1.f + exp_vec(-x)); }

inline float tanh_vec(float x) {
  const float x2 = x * x;
  // |x| < 0.25: x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 (next term below 4e-9 x).
  const float series = x * (1.f + x2 * (-1.f / 3 + x2 * (2.f / 15 + x2 * (-17.f / 315 + x2 * (62.f / 2835)))));
  const float big = 1.f - 2.f / (exp_vec(2.f * x) + 1.f);
  return std::abs(x) < 0.25f ? series : big;
}

// erf (GELU): near zero its odd Taylor series (relative error below 1e-6 for |x| < 0.5),
// elsewhere Abramowitz and Stegun's 7.1.26, 1 - t P(t) e^-x^2 with t = 1 / (1 + p|x|)
// (absolute error 1.5e-7, below 5e-7 once evaluated in float).
inline float erf_vec(float x) {
  const float x2 = x * x;
  const float series =
      x * (1.1283791671f + x2 * (-0.3761263890f + x2 * (0.1128379167f + x2 * (-0.0268661706f + x2 * 0.0052239776f))));
  const float t = 1.f / (1.f + 0.3275911f * std::abs(x));
  const float p =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float tail = std::copysign(1.f - p * exp_vec(-x2), x);
  return std::abs(x) < 0.5f ? series : tail;
}

}  // namespace bks
