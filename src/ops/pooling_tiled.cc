#include "ops/pooling_tiled.h"

#include "core/parallel.h"

#include <algorithm>
#include <cstring>
#include <vector>

// Built without AVX-512 (-march=native on an AVX2 machine), GCC warns that 16-float vectors
// returned by value would change the ABI. Every such function here is internal to this file
// and inlined, so no ABI is crossed; the 16-lane paths still run there (split in halves) for
// 16-blocked layouts.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace bks {
namespace {

// GCC/Clang vector extensions: one register of L floats on AVX-512 (L = 16) or AVX2
// (L = 8); narrower ISAs split it.
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
// The first `lanes` elements; the rest are `fill`.
template <class T, class E>
inline T load_part(const E* p, int64_t lanes, E fill) {
  T v;
  for (int64_t l = 0; l < static_cast<int64_t>(sizeof v / sizeof(E)); ++l) v[l] = l < lanes ? p[l] : fill;
  return v;
}
template <class T, class E>
inline void store_part(E* p, const T& v, int64_t lanes) {
  for (int64_t l = 0; l < lanes; ++l) p[l] = v[l];
}

// One vector of channels: where it starts in an input image and in an output pixel, and
// how many of its lanes are real channels.
struct Group {
  int64_t src, dst, lanes;
};

// The input's geometry in floats: between neighbouring pixels of a row, between rows, and
// between images.
struct SrcStrides {
  int64_t pix, row, img;
};

SrcStrides src_strides(const PoolTiling& t) {
  const int64_t h = t.oh * t.kh, w = t.ow * t.kw;
  if (t.src_block == 0) return {t.c, w * t.c, h * w * t.c};
  const int64_t blocks = (t.c + t.src_block - 1) / t.src_block;
  return {t.src_block, w * t.src_block, blocks * h * w * t.src_block};
}

std::vector<Group> channel_groups(const PoolTiling& t, int L) {
  std::vector<Group> g;
  if (t.src_block == 0) {
    // NHWC: blocks of L, the last shifted back to end at C and overlapping the one before
    // (max and the masked copy are idempotent), so every lane is a real channel.
    for (int64_t k = 0; k + L <= t.c; k += L) g.push_back({k, k, L});
    if (t.c % L) g.push_back({t.c - L, t.c - L, L});
  } else {
    const int64_t plane = t.oh * t.kh * t.ow * t.kw * L;
    for (int64_t b = 0; b * L < t.c; ++b) g.push_back({b * plane, b * L, std::min<int64_t>(L, t.c - b * L)});
  }
  return g;
}

// Offsets (in floats) of each tap of a window from its top-left element.
std::vector<int64_t> tap_offsets(const PoolTiling& t, const SrcStrides& s) {
  std::vector<int64_t> off;
  for (int64_t i = 0; i < t.kh; ++i)
    for (int64_t j = 0; j < t.kw; ++j) off.push_back(i * s.row + j * s.pix);
  return off;
}

// What both kernels walk: the input's strides, the channel vectors, the taps' offsets.
struct WindowPlan {
  SrcStrides st;
  std::vector<Group> groups;
  std::vector<int64_t> off;
  WindowPlan(const PoolTiling& t, int L) : st(src_strides(t)), groups(channel_groups(t, L)), off(tap_offsets(t, st)) {}
};

// Calls f(window, o) for every output position, in parallel over output rows: `window` is
// the offset of the window's top-left input element, `o` that of the output pixel.
template <class F>
void for_each_window(const PoolTiling& t, const SrcStrides& st, F&& f) {
  const bool parallel = t.n * t.oh * t.ow * t.c * t.kh * t.kw >= kSerialBelow;
#pragma omp parallel for if (parallel)
  for (int64_t r = 0; r < t.n * t.oh; ++r) {
    const int64_t row = (r / t.oh) * st.img + (r % t.oh) * t.kh * st.row;
    for (int64_t ox = 0; ox < t.ow; ++ox) f(row + ox * t.kw * st.pix, (r * t.ow + ox) * t.c);
  }
}

template <int L, bool kTrack>
void forward_impl(const PoolTiling& t, const float* x, float* y, int32_t* tap) {
  using F = typename V<L>::f;
  using I = typename V<L>::i;
  const WindowPlan p(t, L);
  const auto& off = p.off;
  const int64_t taps = static_cast<int64_t>(off.size());
  for_each_window(t, p.st, [&](int64_t window, int64_t o) {
    const float* win = x + window;
    for (const Group& g : p.groups) {
      F m = load<F>(win + g.src);
      I a = I{};
      for (int64_t s = 1; s < taps; ++s) {
        F v = load<F>(win + g.src + off[s]);
        I better = v > m;  // strict: the first maximum wins, as in Caffe
        m = better ? v : m;
        if constexpr (kTrack) a = better ? I{} + static_cast<int32_t>(s) : a;
      }
      if (g.lanes == L) {
        store(y + o + g.dst, m);
        if constexpr (kTrack) store(tap + o + g.dst, a);
      } else {
        store_part(y + o + g.dst, m, g.lanes);
        if constexpr (kTrack) store_part(tap + o + g.dst, a, g.lanes);
      }
    }
  });
}

template <int L>
void backward_impl(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx) {
  using F = typename V<L>::f;
  using I = typename V<L>::i;
  const WindowPlan p(t, L);
  const auto& off = p.off;
  const int64_t taps = static_cast<int64_t>(off.size());
  for_each_window(t, p.st, [&](int64_t window, int64_t o) {
    float* win = dx + window;
    for (const Group& g : p.groups) {
      // Padding lanes of a blocked layout get tap -1: they never win, so they stay zero.
      F gv = g.lanes == L ? load<F>(dy + o + g.dst) : load_part<F>(dy + o + g.dst, g.lanes, 0.f);
      I a = g.lanes == L ? load<I>(tap + o + g.dst) : load_part<I>(tap + o + g.dst, g.lanes, int32_t{-1});
      for (int64_t s = 0; s < taps; ++s) store(win + g.src + off[s], a == static_cast<int32_t>(s) ? gv : F{});
    }
  });
}

}  // namespace

bool pool_tiled_applies(int64_t channels, int64_t src_block) {
  return src_block == 0 ? channels >= 8 : src_block == 8 || src_block == 16;
}

void pool_tiled_max_forward(const PoolTiling& t, const float* x, float* y, int32_t* tap) {
  if (t.src_block == 16 || (t.src_block == 0 && t.c >= 16))
    tap ? forward_impl<16, true>(t, x, y, tap) : forward_impl<16, false>(t, x, y, tap);
  else
    tap ? forward_impl<8, true>(t, x, y, tap) : forward_impl<8, false>(t, x, y, tap);
}

void pool_tiled_max_backward(const PoolTiling& t, const float* dy, const int32_t* tap, float* dx) {
  if (t.src_block == 16 || (t.src_block == 0 && t.c >= 16))
    backward_impl<16>(t, dy, tap, dx);
  else
    backward_impl<8>(t, dy, tap, dx);
}

}  // namespace bks
