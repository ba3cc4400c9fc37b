#include "conv_oracle.h"

#include <fmt/format.h>

#include "op_harness.h"

namespace bks::test {

std::string conv_layer(const char* type, const ConvSpec& k) {
  return fmt::format(
      "type: '{}' convolution_param {{ num_output: {} kernel_h: {} kernel_w: {} stride_h: {} stride_w: {} pad_h: {} "
      "pad_w: {} dilation: {} dilation: {} group: {} bias_term: {} }}",
      type, k.oc, k.kh, k.kw, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, k.group, k.bias ? "true" : "false");
}

Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvSpec& k) {
  int64_t n = x.dim(0), c = x.dim(1), H = x.dim(2), W = x.dim(3);
  int64_t oh = (H + 2 * k.ph - (k.dh * (k.kh - 1) + 1)) / k.sh + 1;
  int64_t ow = (W + 2 * k.pw - (k.dw * (k.kw - 1) + 1)) / k.sw + 1;
  int64_t icg = c / k.group, ocg = k.oc / k.group;
  Tensor y({n, k.oc, oh, ow});
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < k.oc; ++o)
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = b ? b->f32()[o] : 0.0;
          for (int64_t ci = 0; ci < icg; ++ci)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                int64_t iy = yy * k.sh - k.ph + i * k.dh, ix = xx * k.sw - k.pw + j * k.dw;
                if (iy < 0 || ix < 0 || iy >= H || ix >= W) continue;
                acc += static_cast<double>(w.f32()[((o * icg + ci) * k.kh + i) * k.kw + j]) *
                       at4(x, s, (o / ocg) * icg + ci, iy, ix);
              }
          y.f32()[((s * k.oc + o) * oh + yy) * ow + xx] = static_cast<float>(acc);
        }
  return y;
}

}  // namespace bks::test
