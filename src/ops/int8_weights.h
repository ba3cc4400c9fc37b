// How the INT8 kernels (Int8Conv, Int8MatMul) round FP32 weights: one scale per output
// channel, levels / max |w| (backend/dnnl_util.h's int8_weight_levels), then round to
// nearest. Bundles stored with `deploy --compress` keep this grid (formats/weight_coding.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/dnnl_util.h"

namespace bks {

// The scale of a channel whose largest |w| is `max_abs` (1 for an all-zero channel).
inline float int8_weight_scale(float max_abs) { return max_abs > 0.f ? int8_weight_levels() / max_abs : 1.f; }
// A weight's int8 level at that scale.
inline int8_t int8_weight_level(float w, float scale) {
  return static_cast<int8_t>(std::clamp(std::nearbyint(w * scale), -127.f, 127.f));
}

}  // namespace bks
