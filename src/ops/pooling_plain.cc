#include "ops/pooling_plain.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "core/parallel.h"

namespace bks {

namespace {

void pool_plane(const PoolPlainGeometry& g, const float* x, float* y, float* row) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t hs = oy * g.sh - g.ph, he = std::min(hs + g.kh, g.h + g.ph);
    const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(he, g.h);
    float* out = y + oy * g.ow;
    if (h0 >= h1) {
      std::fill_n(out, g.ow, g.max ? -FLT_MAX : 0.f);
      continue;
    }
    // The window's rows reduced into one row.
    const float* first = x + h0 * g.w;
#pragma omp simd
    for (int64_t j = 0; j < g.w; ++j) row[j] = first[j];
    for (int64_t i = h0 + 1; i < h1; ++i) {
      const float* r = x + i * g.w;
      if (g.max) {
#pragma omp simd
        for (int64_t j = 0; j < g.w; ++j) row[j] = std::max(row[j], r[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < g.w; ++j) row[j] += r[j];
      }
    }
    const float rows = static_cast<float>(he - hs);
    // Outputs whose window lies inside the row: one pass per tap, vectorised along x.
    const int64_t lo = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
    const int64_t hi = std::max(lo, std::min(g.ow, g.w + g.pw - g.kw >= 0 ? (g.w + g.pw - g.kw) / g.sw + 1 : 0));
    const int64_t off = -g.pw;
#pragma omp simd
    for (int64_t ox = lo; ox < hi; ++ox) out[ox] = row[ox * g.sw + off];
    for (int64_t k = 1; k < g.kw; ++k) {
      if (g.max) {
#pragma omp simd
        for (int64_t ox = lo; ox < hi; ++ox) out[ox] = std::max(out[ox], row[ox * g.sw + off + k]);
      } else {
#pragma omp simd
        for (int64_t ox = lo; ox < hi; ++ox) out[ox] += row[ox * g.sw + off + k];
      }
    }
    if (!g.max) {
      const float inv = 1.f / (rows * static_cast<float>(g.kw));
#pragma omp simd
      for (int64_t ox = lo; ox < hi; ++ox) out[ox] *= inv;
    }
    // The edges: windows clipped by the input's border.
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      if (ox == lo) ox = hi;
      if (ox >= g.ow) break;
      const int64_t ws = ox * g.sw - g.pw, we = std::min(ws + g.kw, g.w + g.pw);
      const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(we, g.w);
      if (w0 >= w1) {
        out[ox] = g.max ? -FLT_MAX : 0.f;
        continue;
      }
      float acc = row[w0];
      if (g.max)
        for (int64_t j = w0 + 1; j < w1; ++j) acc = std::max(acc, row[j]);
      else
        for (int64_t j = w0 + 1; j < w1; ++j) acc += row[j];
      out[ox] = g.max ? acc : acc / (rows * static_cast<float>(we - ws));
    }
  }
}

}  // namespace

void pool_plain_forward(const PoolPlainGeometry& g, const float* x, float* y) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
#pragma omp parallel if (g.planes * in_plane >= kSerialBelow)
  {
    std::vector<float> row(static_cast<size_t>(g.w));
#pragma omp for
    for (int64_t p = 0; p < g.planes; ++p) pool_plane(g, x + p * in_plane, y + p * out_plane, row.data());
  }
}

}  // namespace bks
