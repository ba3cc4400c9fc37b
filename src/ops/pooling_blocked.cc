#include "ops/pooling_blocked.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/parallel.h"

namespace bks {
namespace {

typedef float v8 __attribute__((vector_size(32)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline v8 max8(v8 a, v8 b) { return a > b ? a : b; }

// One output row of one channel block: for each output pixel, the maximum over its window
// [h0, h1) x [w0, w1) of B-float vectors (B / 8 registers).
template <int B>
void row(const PoolBlockedGeometry& g, const float* plane, float* out, int64_t h0, int64_t h1) {
  constexpr int R = B / 8;
  for (int64_t ox = 0; ox < g.ow; ++ox) {
    const int64_t ws = ox * g.sw - g.pw;
    const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + g.kw, g.w);
    v8 acc[R];
    if (h1 <= h0 || w1 <= w0) {  // a window wholly in the padding: Caffe's initial -FLT_MAX
      std::fill_n(out + ox * B, B, -std::numeric_limits<float>::max());
      continue;
    }
    const float* first = plane + (h0 * g.w + w0) * B;
    for (int r = 0; r < R; ++r) acc[r] = load8(first + 8 * r);
    for (int64_t i = h0; i < h1; ++i) {
      const float* p = plane + (i * g.w + w0) * B;
      for (int64_t j = w0; j < w1; ++j, p += B)
        for (int r = 0; r < R; ++r) acc[r] = max8(acc[r], load8(p + 8 * r));
    }
    std::memcpy(out + ox * B, acc, sizeof acc);
  }
}

template <int B>
void forward(const PoolBlockedGeometry& g, const float* x, float* y) {
  const int64_t blocks = (g.c + B - 1) / B, rows = g.n * blocks * g.oh;
  // Work: one output row of one block per item, each oh * ow * B floats from kh rows.
  parallel_ranges(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t oy = r % g.oh, nb = r / g.oh;
          const int64_t hs = oy * g.sh - g.ph;
          const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + g.kh, g.h);
          row<B>(g, x + nb * g.h * g.w * B, y + (nb * g.oh + oy) * g.ow * B, h0, h1);
        }
      },
      std::max<int64_t>(1, kSerialBelow / std::max<int64_t>(1, g.ow * B)));
}

}  // namespace

void pool_blocked_max_forward(const PoolBlockedGeometry& g, const float* x, float* y) {
  if (g.block == 16)
    forward<16>(g, x, y);
  else
    forward<8>(g, x, y);
}

}  // namespace bks
