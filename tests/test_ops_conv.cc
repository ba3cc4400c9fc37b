// Convolution and Deconvolution: forward against a direct loop, backward by finite
// differences, over odd shapes, groups, padding, strides and dilation.
#include <gtest/gtest.h>

#include "op_harness.h"

namespace bks::test {
namespace {

struct ConvCase {
  int n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw, group;
  bool bias;
};

std::string conv_text(const char* type, const ConvCase& k) {
  return fmt::format(
      "name: 'c' type: '{}' convolution_param {{ num_output: {} kernel_h: {} kernel_w: {} stride_h: {} stride_w: {} "
      "pad_h: {} pad_w: {} dilation: {} dilation: {} group: {} bias_term: {} }}",
      type, k.oc, k.kh, k.kw, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, k.group, k.bias ? "true" : "false");
}

// y[n][o][y][x] = b[o] + sum_{c in group, i, j} w[o][c][i][j] * x[n][c][y*s - p + i*d][x*s - p + j*d]
Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvCase& k) {
  int64_t oh = (k.h + 2 * k.ph - (k.dh * (k.kh - 1) + 1)) / k.sh + 1;
  int64_t ow = (k.w + 2 * k.pw - (k.dw * (k.kw - 1) + 1)) / k.sw + 1;
  Tensor y({k.n, k.oc, oh, ow});
  int64_t icg = k.c / k.group, ocg = k.oc / k.group;
  for (int n = 0; n < k.n; ++n)
    for (int o = 0; o < k.oc; ++o)
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double s = b ? b->f32()[o] : 0.0;
          int64_t g = o / ocg;
          for (int64_t ci = 0; ci < icg; ++ci)
            for (int i = 0; i < k.kh; ++i)
              for (int j = 0; j < k.kw; ++j) {
                int64_t iy = yy * k.sh - k.ph + i * k.dh, ix = xx * k.sw - k.pw + j * k.dw;
                if (iy < 0 || ix < 0 || iy >= k.h || ix >= k.w) continue;
                s += static_cast<double>(w.f32()[((o * icg + ci) * k.kh + i) * k.kw + j]) *
                     at4(x, n, g * icg + ci, iy, ix);
              }
          y.f32()[((n * k.oc + o) * oh + yy) * ow + xx] = static_cast<float>(s);
        }
  return y;
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardMatchesDirectLoop) {
  const auto& k = GetParam();
  OpHarness h(conv_text("Convolution", k), {{k.n, k.c, k.h, k.w}});
  h.forward();
  Tensor ref = naive_conv(h.in[0], h.params[0], k.bias ? &h.params[1] : nullptr, k);
  expect_close(h.out[0], ref, 1e-4f, "convolution");
}

TEST_P(ConvTest, GradientsMatchFiniteDifferences) {
  const auto& k = GetParam();
  OpHarness h(conv_text("Convolution", k), {{k.n, k.c, k.h, k.w}});
  h.check_gradients(1e-2f, 1e-2f);
}

TEST_P(ConvTest, DeconvolutionIsTheAdjointOfConvolution) {
  // <conv(x), y> == <x, deconv(y)> for the same weights and no bias.
  ConvCase k = GetParam();
  k.bias = false;
  OpHarness conv(conv_text("Convolution", k), {{k.n, k.c, k.h, k.w}});
  conv.forward();
  ConvCase d = k;
  d.oc = k.c;  // deconvolution back to the convolution's input channels
  Shape yshape = conv.out[0].shape();
  OpHarness deconv(conv_text("Deconvolution", d), {yshape});
  ASSERT_EQ(deconv.params[0].shape(), (Shape{yshape[1], k.c / k.group, k.kh, k.kw}));
  // Caffe's deconvolution weight (in=oc, out=c/g) is the convolution's (oc, c/g) weight.
  deconv.params[0].copy_from(conv.params[0]);
  deconv.in[0].copy_from(conv.out_grad[0]);
  deconv.forward();
  ASSERT_EQ(deconv.out[0].shape(), conv.in[0].shape()) << "output size rule";
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < conv.out[0].numel(); ++i) lhs += conv.out[0].f32()[i] * conv.out_grad[0].f32()[i];
  for (int64_t i = 0; i < conv.in[0].numel(); ++i) rhs += conv.in[0].f32()[i] * deconv.out[0].f32()[i];
  EXPECT_NEAR(lhs, rhs, 1e-3 * std::max(1.0, std::fabs(lhs)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Values(ConvCase{2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
                                           ConvCase{1, 4, 9, 7, 6, 3, 2, 2, 1, 1, 0, 1, 1, 2, true},
                                           ConvCase{2, 2, 8, 9, 3, 3, 3, 1, 2, 2, 1, 2, 1, 1, false},
                                           ConvCase{1, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, true},
                                           ConvCase{3, 1, 6, 5, 2, 5, 5, 1, 1, 2, 2, 1, 1, 1, true}));

TEST(Deconvolution, GradientsMatchFiniteDifferences) {
  OpHarness h(
      "type: 'Deconvolution' convolution_param { num_output: 3 kernel_size: 3 stride: 2 pad: 1 group: 1 "
      "weight_filler { type: 'gaussian' } bias_filler { type: 'gaussian' } }",
      {{2, 2, 4, 3}});
  h.check_gradients(1e-2f, 1e-2f);
}

TEST(Convolution, RejectsBadGeometry) {
  EXPECT_THROW(
      OpHarness("type: 'Convolution' convolution_param { num_output: 4 kernel_size: 3 group: 3 }", {{1, 4, 5, 5}}),
      InputError);
  EXPECT_THROW(OpHarness("type: 'Convolution' convolution_param { num_output: 4 kernel_size: 9 }", {{1, 4, 5, 5}}),
               InputError);
  EXPECT_THROW(OpHarness("type: 'Convolution' convolution_param { num_output: 4 }", {{1, 4, 5, 5}}), InputError);
}

}  // namespace
}  // namespace bks::test
