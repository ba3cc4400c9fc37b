#include "ops/pooling_tiled.h"

#include <cstring>
#include <vector>

namespace bks {
namespace {

// GCC/Clang vector extensions: one register of L floats on AVX-512 (L = 16) or AVX2
// (L = 8); narrower ISAs split it. Channel blocks of L; the last block is shifted back to
// end at C, overlapping the previous one (max and the masked copy are idempotent).
template <int L>
struct V {
  typedef float f __attribute__((vector_size(L * 4)));
  typedef int32_t i __attribute__((vector_size(L * 4)));
};

template <class T>
inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(void* p, const T& v) {
  std::memcpy(p, &v, sizeof v);
}

std::vector<int64_t> channel_blocks(int64_t c, int L) {
  std::vector<int64_t> b;
  for (int64_t k = 0; k + L <= c; k += L) b.push_back(k);
  if (c % L) b.push_back(c - L);
  return b;
}

// Offsets (in floats) of each tap of a window from its top-left element.
std::vector<int64_t> tap_offsets(const PoolTiling& t) {
  std::vector<int64_t> off;
  const int64_t w = t.ow * t.kw;
  for (int64_t i = 0; i < t.kh; ++i)
    for (int64_t j = 0; j < t.kw; ++j) off.push_back((i * w + j) * t.c);
  return off;
}

template <int L, bool kTrack>
void forward_impl(const PoolTiling& t, const float* x, float* y, int32_t* tap) {
  using F = typename V<L>::f;
  using I = typename V<L>::i;
  const auto blocks = channel_blocks(t.c, L);
  const auto off = tap_offsets(t);
  const int64_t taps = static_cast<int64_t>(off.size()), C = t.c;
  const int64_t row = t.ow * t.kw * C;  // one input row
#pragma omp parallel for
  for (int64_t r = 0; r < t.n * t.oh; ++r) {
    const float* xr = x + r * t.kh * row;
    for (int64_t ox = 0; ox < t.ow; ++ox) {
      const float* win = xr + ox * t.kw * C;
      const int64_t o = (r * t.ow + ox) * C;
      for (int64_t k : blocks) {
        F m = load<F>(win + k);
        I a = I{};
        for (int64_t s = 1; s < taps; ++s) {
          F v = load<F>(win + off[s] + k);
          I better = v > m;  // strict: the first maximum wins, as in Caffe
          m = better ? v : m;
          if constexpr (kTrack) a = better ? I{} + static_cast<int32_t>(s) : a;
        }
        store(y + o + k, m);
        if constexpr (kTrack) store(tap + o + k, a);
      }
    }
  }
}

template <int L>
void backward_impl(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx) {
  using F = typename V<L>::f;
  using I = typename V<L>::i;
  const auto blocks = channel_blocks(t.c, L);
  const auto off = tap_offsets(t);
  const int64_t taps = static_cast<int64_t>(off.size()), C = t.c;
  const int64_t row = t.ow * t.kw * C;
#pragma omp parallel for
  for (int64_t r = 0; r < t.n * t.oh; ++r) {
    float* dxr = dx + r * t.kh * row;
    for (int64_t ox = 0; ox < t.ow; ++ox) {
      float* win = dxr + ox * t.kw * C;
      const int64_t o = (r * t.ow + ox) * C;
      for (int64_t k : blocks) {
        F g = load<F>(dy + o + k);
        I a = load<I>(tap + o + k);
        for (int64_t s = 0; s < taps; ++s) store(win + off[s] + k, a == static_cast<int32_t>(s) ? g : F{});
      }
    }
  }
}

}  // namespace

bool pool_tiled_applies(int64_t channels) { return channels >= 8; }

void pool_tiled_max_forward(const PoolTiling& t, const float* x, float* y, int32_t* tap) {
  if (t.c >= 16)
    tap ? forward_impl<16, true>(t, x, y, tap) : forward_impl<16, false>(t, x, y, tap);
  else
    tap ? forward_impl<8, true>(t, x, y, tap) : forward_impl<8, false>(t, x, y, tap);
}

void pool_tiled_max_backward(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx) {
  if (t.c >= 16)
    backward_impl<16>(t, dy, tap, dx);
  else
    backward_impl<8>(t, dy, tap, dx);
}

}  // namespace bks
