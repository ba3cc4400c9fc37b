// Winograd F(4x4, 3x3) convolution for inference, bakusoku's own: oneDNN 2.6 has a Winograd
// kernel only for AVX-512, and without one a 3x3 convolution costs 144 multiply-adds per
// 4x4 output tile and channel pair where this costs 36. The input's 6x6 tiles and the
// weights are transformed, multiplied as 36 matrix products over the channels (sgemm), and
// the products transformed back, with the bias, a residual sum and a (leaky) ReLU fused.
// It reads and writes 8-channel blocks (nChw8c), the layout oneDNN's AVX2 kernels use.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace bks {

struct WinogradShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // source
  int64_t oc = 0, oh = 0, ow = 0;      // destination
  int64_t ph = 0, pw = 0;              // padding before (after: whatever reaches oh, ow)
};


class WinogradConv {
 public:
  // Whether the kernel computes this convolution: a 3x3 window, stride 1, no dilation, one
  // group, channel counts divisible by 8, pads below 3, and source, destination (and
  // residual, when given) in nChw8c.
  static bool applies(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t group,
                      const WinogradShape& s, const dnnl::memory::desc& src, const dnnl::memory::desc& dst);

  // `post`: the node's fused residual sum and (leaky or bounded) ReLU; the residual is read in
  // the destination's layout.
  WinogradConv(const WinogradShape& s, const FusedPostOps& post);
  // Transforms the weights (OIHW, Caffe's layout) and keeps the bias (null: none).
  void set_weights(const float* weights, const float* bias);
  bool has_weights() const { return !u_.empty(); }
  // src and dst (and residual) in nChw8c.
  void forward(const float* src, float* dst, const float* residual = nullptr);

 private:
  // Tiles [t0, t0 + tiles) of the batch (image-major, then tile rows) into v[point][tile][c].
  void input_transform(const float* src, float* v, int64_t t0, int64_t tiles) const;
  // The products m[point][tile][oc] of tiles [t0, t0 + tiles) back to outputs, with the
  // bias, the residual and the ReLU.
  void output_transform(const float* m, float* dst, const float* residual, int64_t t0, int64_t tiles) const;

  WinogradShape s_;
  FusedPostOps post_;
  int64_t tiles_h_ = 0, tiles_w_ = 0;  // 4x4 output tiles per image, down and across
  int64_t chunk_ = 0;                  // tiles transformed and multiplied at a time
  std::vector<float> u_;               // transformed weights [36][c][oc]
  std::vector<float> bias_;            // [oc], zeros without a bias
};

}  // namespace bks
