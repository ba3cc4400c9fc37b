// Max pooling whose windows tile the input exactly (stride equal to the kernel, no
// padding, no overhang): LeNet's and most classifiers' 2x2/2 pooling. The output and the
// winners are channels-last (NHWC); the input is NHWC or oneDNN's channel-blocked nChw16c /
// nChw8c, which first-layer convolutions write fastest. Every input element belongs to
// exactly one window, so backward writes the input gradient in one streaming pass (no zero
// fill, no scatter); the winner is kept as the tap index inside its window.
#pragma once

#include <cstdint>

namespace bks {

struct PoolTiling {
  int64_t n, c, oh, ow, kh, kw;
  int64_t src_block = 0;  // 0: NHWC input; 8 or 16: nChw8c / nChw16c input
};

// True when the channel count is wide enough for the vector kernels (8 floats or more)
// and the input layout is one the kernels read.
bool pool_tiled_applies(int64_t channels, int64_t src_block);
// tap may be null (inference): then only y is written.
void pool_tiled_max_forward(const PoolTiling& t, const float* x, float* y, int32_t* tap);
// Writes all of dx, including a blocked layout's padding channels (zero).
void pool_tiled_max_backward(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx);

}  // namespace bks
