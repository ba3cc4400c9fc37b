// Convolution and Deconvolution: forward against a direct loop, backward by finite
// differences, over odd shapes, groups, padding, strides and dilation.
#include <gtest/gtest.h>

#include "conv_oracle.h"
#include "op_harness.h"

namespace bks::test {
namespace {

struct ConvCase {
  int64_t n, c, h, w;  // the input
  ConvSpec k;
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardMatchesDirectLoop) {
  const auto& [n, c, hh, w, k] = GetParam();
  OpHarness h(conv_layer("Convolution", k), {{n, c, hh, w}});
  h.forward();
  Tensor ref = naive_conv(h.in[0], h.params[0], k.bias ? &h.params[1] : nullptr, k);
  expect_close(h.out[0], ref, 1e-4f, "convolution");
}

TEST_P(ConvTest, GradientsMatchFiniteDifferences) {
  const auto& [n, c, hh, w, k] = GetParam();
  OpHarness h(conv_layer("Convolution", k), {{n, c, hh, w}});
  h.check_gradients(1e-2f, 1e-2f);
}

TEST_P(ConvTest, DeconvolutionIsTheAdjointOfConvolution) {
  // <conv(x), y> == <x, deconv(y)> for the same weights and no bias.
  const ConvCase& p = GetParam();
  ConvSpec k = p.k;
  k.bias = false;
  OpHarness conv(conv_layer("Convolution", k), {{p.n, p.c, p.h, p.w}});
  conv.forward();
  ConvSpec d = k;
  d.oc = p.c;  // deconvolution back to the convolution's input channels
  Shape yshape = conv.out[0].shape();
  OpHarness deconv(conv_layer("Deconvolution", d), {yshape});
  ASSERT_EQ(deconv.params[0].shape(), (Shape{yshape[1], p.c / k.group, k.kh, k.kw}));
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
