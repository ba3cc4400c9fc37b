// Patch matrices (Caffe's im2col/col2im, transposed) for GEMM-based convolution kernels.
//
// A window of kh x kw taps visits the positions of a grid_h x grid_w grid over an image of
// (channels, height, width): at grid position (gy, gx), tap (i, j) reads image pixel
// (gy * sh - ph + i * dh, gx * sw - pw + j * dw), zero outside the image. The patch matrix
// has one row per grid position p = gy * grid_w + gx and one column per (channel, i, j),
// index (c * kh + i) * kw + j. Rows, not Caffe's columns, are positions, so one tap row
// (kw values) is contiguous in both the matrix and the image: the loops below vectorise,
// and a block of rows [p0, p1) is a small matrix a GEMM can fill and that stays in cache.
#pragma once

#include <cstdint>

namespace bks {

struct PatchGeometry {
  int64_t channels = 0, height = 0, width = 0;  // the image
  int64_t grid_h = 0, grid_w = 0;               // the positions the window visits
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t positions() const { return grid_h * grid_w; }
  int64_t row_size() const { return channels * kh * kw; }
};

// patches[p - p0][(c * kh + i) * kw + j] = the image pixel tap (i, j) reads at position p
// (0 outside the image), for p in [p0, p1). Rows are row_size() apart. OpenMP over rows.
void gather_patches(const PatchGeometry& g, const float* image, int64_t p0, int64_t p1, float* patches);

// The transpose of gather_patches: adds every entry of rows [p0, p1) into the image pixel
// it would have been read from (entries outside the image are dropped). OpenMP over image
// rows, each written by one thread, so overlapping windows need no atomics.
void scatter_add_patches(const PatchGeometry& g, const float* patches, int64_t p0, int64_t p1, float* image);

}  // namespace bks
