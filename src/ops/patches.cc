#include "ops/patches.h"

#include <algorithm>

namespace bks {
namespace {

// The taps t in [lo, hi) of a k-tap window starting at `start` with step d that land in
// [0, size); an empty range has lo == hi.
void valid_taps(int64_t start, int64_t d, int64_t k, int64_t size, int64_t& lo, int64_t& hi) {
  lo = start >= 0 ? 0 : (-start + d - 1) / d;
  int64_t room = size - 1 - start;  // the largest t * d that stays inside
  hi = room < 0 ? 0 : std::min(k, room / d + 1);
  lo = std::min(lo, k);
  hi = std::max(hi, lo);
}

}  // namespace

void gather_patches(const PatchGeometry& g, const float* image, int64_t p0, int64_t p1, float* patches) {
  const int64_t row = g.row_size();
#pragma omp parallel for schedule(static)
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t gy = p / g.grid_w, gx = p % g.grid_w;
    const int64_t y0 = gy * g.sh - g.ph, x0 = gx * g.sw - g.pw;
    int64_t ilo, ihi, jlo, jhi;
    valid_taps(y0, g.dh, g.kh, g.height, ilo, ihi);
    valid_taps(x0, g.dw, g.kw, g.width, jlo, jhi);
    float* out = patches + (p - p0) * row;
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t i = 0; i < g.kh; ++i) {
        float* __restrict dst = out + (c * g.kh + i) * g.kw;
        if (i < ilo || i >= ihi) {
          std::fill(dst, dst + g.kw, 0.f);
          continue;
        }
        // Index arithmetic in int64: x0 may be negative, only valid taps are read.
        const int64_t base = (c * g.height + y0 + i * g.dh) * g.width + x0;
        std::fill(dst, dst + jlo, 0.f);
        if (g.dw == 1) {
          const float* __restrict src = image + base + jlo;
          for (int64_t j = 0; j < jhi - jlo; ++j) dst[jlo + j] = src[j];
        } else {
          for (int64_t j = jlo; j < jhi; ++j) dst[j] = image[base + j * g.dw];
        }
        std::fill(dst + jhi, dst + g.kw, 0.f);
      }
  }
}

void scatter_add_patches(const PatchGeometry& g, const float* patches, int64_t p0, int64_t p1, float* image) {
  if (p1 <= p0) return;
  const int64_t row = g.row_size();
  const int64_t gy0 = p0 / g.grid_w, gy1 = (p1 - 1) / g.grid_w;
  // The image rows these grid rows' windows reach.
  const int64_t ylo = std::max<int64_t>(0, gy0 * g.sh - g.ph);
  const int64_t yhi = std::min(g.height, gy1 * g.sh - g.ph + (g.kh - 1) * g.dh + 1);
  if (yhi <= ylo) return;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t y = ylo; y < yhi; ++y) {
      float* __restrict out = image + (c * g.height + y) * g.width;
      for (int64_t i = 0; i < g.kh; ++i) {
        // Grid row gy reaches image row y through tap row i when gy * sh = y + ph - i * dh.
        const int64_t t = y + g.ph - i * g.dh;
        if (t < 0 || t % g.sh != 0) continue;
        const int64_t gy = t / g.sh;
        if (gy < gy0 || gy > gy1) continue;
        const int64_t gxlo = std::max<int64_t>(0, p0 - gy * g.grid_w);
        const int64_t gxhi = std::min(g.grid_w, p1 - gy * g.grid_w);
        for (int64_t gx = gxlo; gx < gxhi; ++gx) {
          const int64_t x0 = gx * g.sw - g.pw;
          int64_t jlo, jhi;
          valid_taps(x0, g.dw, g.kw, g.width, jlo, jhi);
          const float* __restrict src = patches + (gy * g.grid_w + gx - p0) * row + (c * g.kh + i) * g.kw;
          if (g.dw == 1) {
            float* __restrict o = out + x0 + jlo;
            for (int64_t j = 0; j < jhi - jlo; ++j) o[j] += src[jlo + j];
          } else {
            for (int64_t j = jlo; j < jhi; ++j) out[x0 + j * g.dw] += src[j];
          }
        }
      }
    }
}

}  // namespace bks
