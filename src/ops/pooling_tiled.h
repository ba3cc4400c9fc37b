// Max pooling over channels-last data whose windows tile the input exactly (stride equal
// to the kernel, no padding, no overhang): LeNet's and most classifiers' 2x2/2 pooling.
// Every input element belongs to exactly one window, so backward writes the input
// gradient in one streaming pass (no zero fill, no scatter), and the winner is kept as the
// tap index inside its window.
#pragma once

#include <cstdint>

namespace bks {

struct PoolTiling {
  int64_t n, c, oh, ow, kh, kw;
};

// True when the channel count is wide enough for the vector kernels (8 floats or more).
bool pool_tiled_applies(int64_t channels);
// tap may be null (inference): then only y is written.
void pool_tiled_max_forward(const PoolTiling& t, const float* x, float* y, int32_t* tap);
void pool_tiled_max_backward(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx);

}  // namespace bks
