// Max and average pooling on plain NCHW planes with Caffe's windows: start at
// i * stride - pad, clipped to the input; the average divides by the window clipped to the
// input plus its padding (so the ceil-mode overhang does not count). Each output row
// reduces its window's input rows into one row first (vectorised along the width), then
// slides the window along that row. oneDNN 2.6 has only its reference kernel
// (simple_nchw) for plain data: 3x3 max pooling of 256x28x28 took 13 ms there.
#pragma once

#include <cstdint>

namespace bks {

struct PoolPlainGeometry {
  int64_t planes, h, w, oh, ow;  // planes: N * C
  int64_t kh, kw, sh, sw, ph, pw;
  bool max;
};

// Inference only: no winners are recorded. A window with no input (possible only when a
// pad is as large as the window) gives -FLT_MAX for MAX, as Caffe's does, and 0 for AVE.
void pool_plain_forward(const PoolPlainGeometry& g, const float* x, float* y);

}  // namespace bks
