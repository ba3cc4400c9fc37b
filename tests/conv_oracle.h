// Convolution as the op tests write it down: the layer text and a direct loop in double,
// shared by the convolution tests and the registry sweep.
#pragma once

#include <string>

#include "core/tensor.h"

namespace bks::test {

// The fields of convolution_param the tests use.
struct ConvSpec {
  int64_t oc, kh, kw, sh, sw, ph, pw, dh, dw, group;
  bool bias;
};

// A `type` (Convolution or Deconvolution) layer with these fields, without name or bottoms.
std::string conv_layer(const char* type, const ConvSpec& k);

// y[n][o][oy][ox] = b[o] + sum over the group's channels c and taps (i, j) of
//   w[o][c][i][j] * x[n][c][oy * sh - ph + i * dh][ox * sw - pw + j * dw]   (zero outside x)
// for x (N, C, H, W); b may be null.
Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvSpec& k);

// Deconvolution, written as Caffe defines it (each input pixel scatters its window):
// y[n][g * ocg + oo][iy * sh - ph + i * dh][ix * sw - pw + j * dw] +=
//   w[c][oo][i][j] * x[n][c][iy][ix]   for c in group g (ocg = oc / group), plus b[o];
// the output is sh * (H - 1) + dh * (kh - 1) + 1 - 2 ph high (likewise wide).
Tensor naive_deconv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvSpec& k);

}  // namespace bks::test
