// Inference max pooling on oneDNN's channel-blocked layouts (nChw8c, nChw16c), any window,
// stride and padding (Caffe's MAX: padding never wins; ceil-mode windows hanging past the
// input are clipped). Input and output share the layout, so a blocked convolution feeds
// the next one without a reorder. Each output pixel is the lane-wise maximum of its
// window's 8- or 16-float vectors. oneDNN 2.6's AVX2 kernel took 0.98 ms for ResNet-50's
// 3x3/2 pooling of 64 x 112 x 112 at batch 1, MLAS's 0.31 ms.
#pragma once

#include <cstdint>

namespace bks {

struct PoolBlockedGeometry {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  int64_t block;  // 8 or 16 channels per block
};

void pool_blocked_max_forward(const PoolBlockedGeometry& g, const float* x, float* y);

}  // namespace bks
