// NumPy broadcasting (ONNX's multidirectional broadcasting) of two shapes, as Arithmetic and
// BatchMatMul (over its batch axes) read their inputs: shapes align at their last axes, and
// each pair of sizes is equal or one of them is 1.
#pragma once

#include <algorithm>
#include <vector>

#include "core/tensor.h"

namespace bks {

// The broadcast shape of a and b; false when they do not broadcast.
inline bool broadcast_shapes(const Shape& a, const Shape& b, Shape& out) {
  const size_t nd = std::max(a.size(), b.size());
  out.assign(nd, 1);
  for (size_t k = 0; k < nd; ++k) {
    const int64_t x = k < nd - a.size() ? 1 : a[k - (nd - a.size())];
    const int64_t y = k < nd - b.size() ? 1 : b[k - (nd - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    out[k] = x == 1 ? y : x;
  }
  return true;
}

// The step, in elements of a contiguous tensor of shape s, for one step along each axis of
// `out` (which s broadcasts to): 0 along the axes s repeats.
inline std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t step = 1;
  for (size_t k = 0; k < s.size(); ++k) {
    const size_t a = s.size() - 1 - k, o = out.size() - 1 - k;
    st[o] = s[a] == 1 ? 0 : step;
    step *= s[a];
  }
  return st;
}

// For each element of `out` in order, its index in a tensor of shape s (s broadcasts to out).
inline std::vector<int64_t> broadcast_index(const Shape& s, const Shape& out) {
  const std::vector<int64_t> st = broadcast_strides(s, out);
  const int nd = static_cast<int>(out.size());
  std::vector<int64_t> idx(static_cast<size_t>(shape_numel(out))), pos(out.size(), 0);
  int64_t src = 0;
  for (int64_t& v : idx) {
    v = src;
    for (int k = nd - 1; k >= 0; --k) {  // an odometer over out's axes
      src += st[k];
      if (++pos[k] < out[k]) break;
      src -= st[k] * out[k];
      pos[k] = 0;
    }
  }
  return idx;
}

}  // namespace bks
