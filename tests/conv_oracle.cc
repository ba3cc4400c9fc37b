#include "conv_oracle.h"

#include <fmt/format.h>

#include <vector>

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

Tensor naive_deconv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvSpec& k) {
  int64_t n = x.dim(0), c = x.dim(1), H = x.dim(2), W = x.dim(3);
  int64_t oh = k.sh * (H - 1) + k.dh * (k.kh - 1) + 1 - 2 * k.ph;
  int64_t ow = k.sw * (W - 1) + k.dw * (k.kw - 1) + 1 - 2 * k.pw;
  int64_t icg = c / k.group, ocg = k.oc / k.group;
  std::vector<double> acc(static_cast<size_t>(n * k.oc * oh * ow));
  auto at = [&](int64_t s, int64_t o, int64_t yy, int64_t xx) { return ((s * k.oc + o) * oh + yy) * ow + xx; };
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < k.oc; ++o)
      for (int64_t i = 0; i < oh * ow; ++i) acc[at(s, o, 0, 0) + i] = b ? b->f32()[o] : 0.0;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t iy = 0; iy < H; ++iy)
        for (int64_t ix = 0; ix < W; ++ix)
          for (int64_t oo = 0; oo < ocg; ++oo)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                int64_t yy = iy * k.sh - k.ph + i * k.dh, xx = ix * k.sw - k.pw + j * k.dw;
                if (yy < 0 || xx < 0 || yy >= oh || xx >= ow) continue;
                acc[at(s, (ci / icg) * ocg + oo, yy, xx)] +=
                    static_cast<double>(w.f32()[((ci * ocg + oo) * k.kh + i) * k.kw + j]) * at4(x, s, ci, iy, ix);
              }
  Tensor y({n, k.oc, oh, ow});
  for (size_t i = 0; i < acc.size(); ++i) y.f32()[i] = static_cast<float>(acc[i]);
  return y;
}

}  // namespace bks::test
