// Convolution and Deconvolution: forward against a direct loop, backward by finite
// differences, over odd shapes, groups, padding, strides and dilation. The forks'
// depthwise types (ConvolutionDepthwise, DepthwiseConvolution) run the same op.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <random>

#include "backend/dnnl_util.h"
#include "conv_oracle.h"
#include "core/worse.h"
#include "op_harness.h"
#include "ops/conv_winograd.h"
#include "ops/dw_conv_int8.h"

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

// ---- Deconvolution through sgemm + col2im (the kernel production picks) ----

struct DeconvCase {
  const char* name;
  int64_t n, c, h, w;  // the input
  ConvSpec k;
  bool check_gradients = true;
  friend void PrintTo(const DeconvCase& c, std::ostream* os) { *os << c.name; }
};

class DeconvGemmTest : public ::testing::TestWithParam<DeconvCase> {};

TEST_P(DeconvGemmTest, ForwardMatchesDirectLoop) {
  const DeconvCase& p = GetParam();
  OpHarness h(conv_layer("Deconvolution", p.k), {{p.n, p.c, p.h, p.w}}, proto::TRAIN, 1, {}, "gemm");
  h.forward();
  Tensor want = naive_deconv(h.in[0], h.params[0], p.k.bias ? &h.params[1] : nullptr, p.k);
  expect_close(h.out[0], want, 1e-4f, h.op().kernel_name());
}

TEST_P(DeconvGemmTest, GradientsMatchFiniteDifferences) {
  const DeconvCase& p = GetParam();
  if (!p.check_gradients) GTEST_SKIP() << "forward only (large window)";
  OpHarness h(conv_layer("Deconvolution", p.k), {{p.n, p.c, p.h, p.w}}, proto::TRAIN, 1, {}, "gemm");
  h.check_gradients(1e-2f, 1e-2f);
}

// ConvSpec: oc, kh, kw, sh, sw, ph, pw, dh, dw, group, bias.
INSTANTIATE_TEST_SUITE_P(
    Shapes, DeconvGemmTest,
    ::testing::Values(DeconvCase{"fcn8s_upscore8", 2, 2, 3, 2, {2, 16, 16, 8, 8, 0, 0, 1, 1, 1, true}},
                      DeconvCase{"bilinear_group_per_channel", 1, 4, 3, 5, {4, 4, 4, 2, 2, 1, 1, 1, 1, 4, false}},
                      DeconvCase{"fcn32s_upscore", 1, 2, 2, 3, {2, 64, 64, 32, 32, 16, 16, 1, 1, 1, true}, false},
                      DeconvCase{"odd_rect", 2, 3, 7, 6, {5, 5, 3, 3, 2, 2, 1, 1, 1, 1, true}},
                      DeconvCase{"group_dilation", 1, 4, 3, 4, {6, 3, 2, 1, 2, 0, 1, 2, 1, 2, false}},
                      DeconvCase{"pad_crops_edges", 2, 2, 4, 4, {3, 4, 4, 2, 2, 3, 3, 1, 1, 1, true}},
                      DeconvCase{"pointwise", 2, 3, 3, 2, {2, 1, 1, 1, 1, 0, 0, 1, 1, 1, true}}),
    [](const auto& info) { return std::string(info.param.name); });

// Large enough that the patch rows come in two blocks, the second starting mid-row:
// every gradient against the reference loops.
TEST(DeconvolutionGemm, BlocksOfPositionsMatchTheReference) {
  ConvSpec k{21, 16, 16, 8, 8, 4, 4, 1, 1, 1, true};
  Shape in{2, 4, 15, 14};
  OpHarness gemm(conv_layer("Deconvolution", k), {in}, proto::TRAIN, 1, {}, "gemm");
  EXPECT_NE(gemm.op().kernel_name().find("(195 positions a block)"), std::string::npos) << gemm.op().kernel_name();
  gemm.forward();
  expect_close(gemm.out[0], naive_deconv(gemm.in[0], gemm.params[0], &gemm.params[1], k), 1e-4f, "forward");
  gemm.backward();
  OpHarness ref(conv_layer("Deconvolution", k), {in}, proto::TRAIN, 1, {}, "reference");
  ref.backward();  // its forward is slow; backward needs only the inputs and output gradient
  expect_close(gemm.in_grad[0], ref.in_grad[0], 1e-4f, "input gradient");
  expect_close(gemm.param_grad[0], ref.param_grad[0], 1e-4f, "weight gradient");
  expect_close(gemm.param_grad[1], ref.param_grad[1], 1e-4f, "bias gradient");
}

constexpr const char* kUpscore32 =
    "type: 'Deconvolution' convolution_param { num_output: 21 bias_term: false kernel_size: 64 stride: 32 }";

// FCN-32s' upscore: oneDNN 2.6 has only reference kernels for some of its passes (its
// forward, in any layout, on AVX2; FCN-8s' upscore8 had one too until the convolution
// kernels learnt to let oneDNN pick the backward layouts). The oneDNN kernel says so
// (through the watch the runtime puts around prepare()); the kernel the registry prefers
// runs sgemm for those passes instead and builds no slow path of its own.
TEST(DeconvolutionGemm, ReplacesOneDnnReferenceKernels) {
  bool onednn_slow = false;
  {
    DnnlReferenceWatch watch;
    OpHarness onednn(kUpscore32, {{1, 21, 2, 2}}, proto::TRAIN, 1, {}, "oneDNN");
    onednn_slow = !watch.found().empty();
    if (onednn_slow) {
      EXPECT_NE(watch.found()[0].find("convolution backward-"), std::string::npos) << watch.found()[0];
      EXPECT_NE(watch.found()[0].find("ref"), std::string::npos) << watch.found()[0];
    }
  }
  DnnlReferenceWatch watch;
  OpHarness picked(kUpscore32, {{1, 21, 2, 2}});
  // Where oneDNN has reference loops for a pass, the preferred kernel runs sgemm for it; where
  // it has none (this AVX2 machine, since oneDNN picks the layouts), it is oneDNN's.
  if (onednn_slow) {
    EXPECT_NE(picked.op().kernel_name().find("sgemm"), std::string::npos) << picked.op().kernel_name();
  }
  EXPECT_TRUE(watch.found().empty()) << watch.found()[0];
  // And it computes what the reference does, forward and backward.
  OpHarness ref(kUpscore32, {{1, 21, 2, 2}}, proto::TRAIN, 1, {}, "reference");
  picked.forward();
  ref.forward();
  expect_close(picked.out[0], ref.out[0], 1e-4f, "forward");
  picked.backward();
  ref.backward();
  // Each input gradient sums 21 x 64 x 64 = 86,016 products: float sums in oneDNN's order
  // differ from the double reference by up to 1.3e-4 of the result (AVX-512 kernels).
  expect_close(picked.in_grad[0], ref.in_grad[0], 1e-3f, "input gradient");
  expect_close(picked.param_grad[0], ref.param_grad[0], 1e-4f, "weight gradient");
}

// Where oneDNN has fast kernels (a stride-1 window) the preferred kernel leaves them to it.
TEST(DeconvolutionGemm, KeepsOneDnnWhereItIsFast) {
  OpHarness h("type: 'Deconvolution' convolution_param { num_output: 8 kernel_size: 3 pad: 1 }", {{1, 8, 6, 6}});
  EXPECT_EQ(h.op().kernel_name().rfind("oneDNN ", 0), 0u) << h.op().kernel_name();
}

// Not a test (disabled; nothing asserts on time): forward and backward milliseconds of each
// Deconvolution kernel on FCN's layers and a few others, for docs/benchmarks.md. Run with
//   test_ops_conv --gtest_also_run_disabled_tests --gtest_filter='*DeconvolutionTiming*'
// BKS_DECONV_TIMING_ONEDNN=1 includes oneDNN's kernel, which takes minutes on FCN's shapes;
// BKS_DECONV_TIMING_FORWARD_ONLY=1 skips backward, BKS_DECONV_TIMING_ONLY=<prefix> picks rows.
TEST(DeconvolutionGemm, DISABLED_DeconvolutionTiming) {
  struct Row {
    const char* what;
    const char* layer;
    Shape in;
  };
  const Row rows[] = {
      {"FCN-8s upscore2", "num_output: 21 bias_term: false kernel_size: 4 stride: 2", {1, 21, 16, 16}},
      {"FCN-8s upscore_pool4", "num_output: 21 bias_term: false kernel_size: 4 stride: 2", {1, 21, 34, 34}},
      {"FCN-8s upscore8", "num_output: 21 bias_term: false kernel_size: 16 stride: 8", {1, 21, 70, 70}},
      {"FCN-32s upscore", "num_output: 21 bias_term: false kernel_size: 64 stride: 32", {1, 21, 16, 16}},
      {"bilinear x2, group 64", "num_output: 64 bias_term: false kernel_size: 4 stride: 2 pad: 1 group: 64",
       {1, 64, 56, 56}},
      {"U-Net up 128->64 k2 s2", "num_output: 64 kernel_size: 2 stride: 2", {1, 128, 56, 56}},
      {"DCGAN 256->128 k4 s2 p1", "num_output: 128 kernel_size: 4 stride: 2 pad: 1", {16, 256, 8, 8}},
      {"stride 1 k3 64->64", "num_output: 64 kernel_size: 3 pad: 1", {1, 64, 56, 56}},
  };
  const bool onednn = std::getenv("BKS_DECONV_TIMING_ONEDNN") != nullptr;
  const char* only = std::getenv("BKS_DECONV_TIMING_ONLY");  // a row's name starts with this
  for (const Row& r : rows)
    for (const char* kernel : {"gemm", "oneDNN"}) {
      if (!onednn && std::string(kernel) == "oneDNN" && std::string(r.what).rfind("FCN", 0) == 0) continue;
      if (only && std::string(r.what).rfind(only, 0) != 0) continue;
      std::string layer = std::string("type: 'Deconvolution' convolution_param { ") + r.layer + " }";
      OpHarness h(layer, {r.in}, proto::TRAIN, 1, {}, kernel);
      // Best wall and process CPU milliseconds of 5 runs (CPU time: the machine may be shared).
      auto ms = [](auto&& f, double& cpu) {
        double best = 1e30;
        cpu = 1e30;
        for (int i = 0; i < 5; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          std::clock_t c0 = std::clock();
          f();
          cpu = std::min(cpu, 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
          best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          if (best > 2000) break;  // one run of a reference kernel is enough
        }
        return best;
      };
      double fc, bc = 0, f = ms([&] { h.forward(); }, fc), b = 0;
      if (!std::getenv("BKS_DECONV_TIMING_FORWARD_ONLY")) b = ms([&] { h.backward(); }, bc);
      std::printf("%-26s %-6s forward %9.2f ms (cpu %9.2f)  backward %9.2f ms (cpu %9.2f)  [%s]\n", r.what, kernel, f,
                  fc, b, bc, h.op().kernel_name().c_str());
      std::fflush(stdout);
    }
}

// The error building the layer gives, which must contain `needle`.
void expect_conv_error(const std::string& layer, const Shape& in, const std::string& needle) {
  try {
    OpHarness h(layer, {in});
    ADD_FAILURE() << "no error for: " << layer;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ConvolutionDepthwise filters each channel with its own kernel whatever group the file
// says (the fork ignores it), with weights of C x 1 x kh x kw as its .caffemodel stores them,
// on oneDNN's kernels.
TEST(ConvolutionDepthwise, FiltersEachChannelWithItsOwnKernel) {
  for (const char* group : {"", "group: 1"}) {
    OpHarness h(
        fmt::format("type: 'ConvolutionDepthwise' convolution_param {{ num_output: 2 kernel_size: 2 {} }}", group),
        {{1, 2, 2, 3}});
    ASSERT_EQ(h.params.size(), 2u);
    EXPECT_EQ(h.params[0].shape(), (Shape{2, 1, 2, 2}));
    EXPECT_EQ(h.params[1].shape(), (Shape{2}));
    ASSERT_EQ(h.out[0].shape(), (Shape{1, 2, 1, 2}));
    EXPECT_NE(h.op().kernel_name().find("oneDNN"), std::string::npos) << h.op().kernel_name();
    float x[] = {1,  2,  3,  4,  5,  6,    // channel 0: rows (1 2 3), (4 5 6)
                 10, 20, 30, 40, 50, 60};  // channel 1
    float w[] = {1, 0, 0,  1,              // channel 0: the main diagonal
                 0, 1, -1, 0};             // channel 1: top right less bottom left
    std::copy(x, x + 12, h.in[0].f32());
    std::copy(w, w + 8, h.params[0].f32());
    h.params[1].f32()[0] = 0.5f;
    h.params[1].f32()[1] = -1.f;
    h.forward();
    // Channel 0: 1 + 5, 2 + 6, plus 0.5; channel 1: 20 - 40, 30 - 50, less 1.
    float want[] = {6.5f, 8.5f, -21, -21};
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(h.out[0].f32()[i], want[i]) << group << " " << i;
  }
  OpHarness g("type: 'ConvolutionDepthwise' convolution_param { num_output: 3 kernel_size: 3 stride: 2 pad: 1 }",
              {{2, 3, 5, 4}});
  g.check_gradients(1e-2f, 1e-2f);
  expect_conv_error("type: 'ConvolutionDepthwise' convolution_param { num_output: 4 kernel_size: 3 }", {1, 2, 5, 5},
                    "num_output 4 must equal the bottom's 2 channels");
  expect_conv_error("type: 'ConvolutionDepthwise' convolution_param { kernel_size: 3 }", {1, 2, 5, 5},
                    "convolution_param.num_output must be given");
}

// DepthwiseConvolution (yonghenglh6's fork) is a Convolution: group and num_output as given.
TEST(DepthwiseConvolution, IsAConvolutionWithTheFilesGroup) {
  OpHarness h("type: 'DepthwiseConvolution' convolution_param { num_output: 4 kernel_size: 3 pad: 1 group: 2 }",
              {{1, 2, 4, 4}});
  EXPECT_EQ(h.params[0].shape(), (Shape{4, 1, 3, 3}));
  h.forward();
  expect_close(h.out[0], naive_conv(h.in[0], h.params[0], &h.params[1], {4, 3, 3, 1, 1, 1, 1, 1, 1, 2, true}), 1e-4f,
               "grouped");
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

namespace bks::test {
namespace {

// Plain NCHW <-> 8-channel blocks (nChw8c); c is a multiple of 8.
std::vector<float> to_blocked(const Tensor& t) {
  const Shape& s = t.shape();
  const int64_t n = s[0], c = s[1], hw = s[2] * s[3];
  std::vector<float> b(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) b[((i * (c / 8) + ch / 8) * hw + p) * 8 + ch % 8] = t.f32()[(i * c + ch) * hw + p];
  return b;
}

void fill_uniform(Tensor& t, Rng& rng, float lo, float hi) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(lo, hi);
}

struct WinogradCase {
  int64_t n, c, h, w, oc, pad;
  bool bias, relu, residual;
  float slope;
  float top = std::numeric_limits<float>::infinity();  // a bounded ReLU's bound
};

class WinogradTest : public ::testing::TestWithParam<WinogradCase> {};

// bakusoku's Winograd F(4x4, 3x3) kernel against the direct loop in double, with its fused
// bias, residual and (leaky) ReLU, on planes that are no multiple of the 4x4 tile.
TEST_P(WinogradTest, MatchesDirectLoop) {
  const WinogradCase& k = GetParam();
  const ConvSpec spec{k.oc, 3, 3, 1, 1, k.pad, k.pad, 1, 1, 1, k.bias};
  Rng rng(7);
  Tensor x({k.n, k.c, k.h, k.w}), wt({k.oc, k.c, 3, 3}), b({k.oc});
  fill_uniform(x, rng, -1.f, 1.f);
  fill_uniform(wt, rng, -0.3f, 0.3f);
  fill_uniform(b, rng, -0.5f, 0.5f);
  Tensor want = naive_conv(x, wt, k.bias ? &b : nullptr, spec);
  const Shape& ys = want.shape();
  Tensor res(ys);
  fill_uniform(res, rng, -1.f, 1.f);

  const WinogradShape ws{k.n, k.c, k.h, k.w, k.oc, ys[2], ys[3], k.pad, k.pad};
  const auto f32 = dnnl::memory::data_type::f32;
  const auto blocked = dnnl::memory::format_tag::nChw8c;
  ASSERT_TRUE(WinogradConv::applies(3, 3, 1, 1, 1, 1, 1, ws, dnnl::memory::desc({k.n, k.c, k.h, k.w}, f32, blocked),
                                    dnnl::memory::desc({ys[0], ys[1], ys[2], ys[3]}, f32, blocked)));
  FusedPostOps post;
  post.relu = k.relu;
  post.relu_slope = k.slope;
  post.relu_max = k.top;
  post.residual_sum = k.residual;
  WinogradConv conv(ws, post);
  conv.set_weights(wt.f32(), k.bias ? b.f32() : nullptr);
  std::vector<float> xb = to_blocked(x), rb = to_blocked(res), yb(static_cast<size_t>(want.numel()));
  conv.forward(xb.data(), yb.data(), k.residual ? rb.data() : nullptr);

  double scale = 0;  // of the outputs before the ReLU (a bound would hide the error's scale)
  for (int64_t i = 0; i < want.numel(); ++i) {
    float r = want.f32()[i] + (k.residual ? res.f32()[i] : 0.f);
    scale = std::max(scale, double(std::abs(r)));
    if (k.relu && r < 0) r *= k.slope;
    if (k.relu) r = std::min(r, k.top);
    want.f32()[i] = r;
  }
  std::vector<float> got = yb;
  for (int64_t i = 0; i < ys[0]; ++i)  // back to NCHW
    for (int64_t ch = 0; ch < ys[1]; ++ch)
      for (int64_t p = 0; p < ys[2] * ys[3]; ++p)
        got[(i * ys[1] + ch) * ys[2] * ys[3] + p] = yb[((i * (ys[1] / 8) + ch / 8) * ys[2] * ys[3] + p) * 8 + ch % 8];
  // Winograd's transforms cost some precision: errors stay within 1e-5 of the outputs' scale
  // (a direct float convolution: about 1e-6).
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) worst = worse(worst, std::abs(double(got[i]) - want.f32()[i]));
  EXPECT_LT(worst, 1e-5 * scale) << "largest output " << scale;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradTest,
    ::testing::Values(WinogradCase{1, 8, 8, 8, 8, 1, false, false, false, 0.f},
                      WinogradCase{2, 16, 13, 11, 24, 1, true, true, false, 0.f},
                      WinogradCase{1, 32, 7, 7, 16, 1, true, true, true, 0.f},
                      WinogradCase{3, 8, 6, 9, 8, 0, true, false, true, 0.f},
                      WinogradCase{1, 24, 5, 14, 8, 2, false, true, false, 0.1f},
                      WinogradCase{2, 64, 17, 17, 64, 1, true, true, true, 0.f},
                      WinogradCase{1, 16, 9, 9, 16, 1, true, true, false, 0.f, 0.5f}),
    [](const auto& info) { return fmt::format("case{}", info.index); });

TEST(WinogradConv, AppliesOnlyTo3x3Stride1In8ChannelBlocks) {
  const WinogradShape s{1, 16, 10, 10, 16, 10, 10, 1, 1};
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc blk({1, 16, 10, 10}, f32, dnnl::memory::format_tag::nChw8c),
      nhwc({1, 16, 10, 10}, f32, dnnl::memory::format_tag::nhwc);
  EXPECT_TRUE(WinogradConv::applies(3, 3, 1, 1, 1, 1, 1, s, blk, blk));
  EXPECT_FALSE(WinogradConv::applies(3, 3, 1, 1, 1, 1, 1, s, nhwc, blk));
  EXPECT_FALSE(WinogradConv::applies(3, 3, 2, 2, 1, 1, 1, s, blk, blk));
  EXPECT_FALSE(WinogradConv::applies(5, 5, 1, 1, 1, 1, 1, s, blk, blk));
  EXPECT_FALSE(WinogradConv::applies(3, 3, 1, 1, 2, 2, 1, s, blk, blk));
  EXPECT_FALSE(WinogradConv::applies(3, 3, 1, 1, 1, 1, 2, s, blk, blk));
  WinogradShape odd = s;
  odd.c = 12;
  EXPECT_FALSE(WinogradConv::applies(3, 3, 1, 1, 1, 1, 1, odd, blk, blk));
}


// bakusoku's INT8 depthwise kernel against a direct loop: y = post(scale * (sum w x + bias)),
// rounded to nearest (ties to even) and saturated, bit for bit. The shapes cover partial
// 16-channel blocks, rows that are no multiple of its 8-output runs, planes narrower than a
// run (every column at an edge), both strides, pads 0-2 and each destination type.
struct DwInt8Case {
  int64_t n, c, h, w, stride, pad;
  dnnl::memory::data_type out;
  bool bias, relu;
  float slope;
  float top = std::numeric_limits<float>::infinity();  // a bounded ReLU's bound, in output units
};

class DwInt8Test : public ::testing::TestWithParam<DwInt8Case> {};

TEST_P(DwInt8Test, MatchesDirectLoopExactly) {
  if (!DwInt8Conv::cpu_supported()) {
    GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  }
  const DwInt8Case& k = GetParam();
  using dt = dnnl::memory::data_type;
  const int64_t oh = (k.h + 2 * k.pad - 3) / k.stride + 1, ow = (k.w + 2 * k.pad - 3) / k.stride + 1;
  const DwInt8Shape shape{k.n, k.c, k.h, k.w, oh, ow, k.stride, k.pad, k.pad};
  const dnnl::memory::desc src({k.n, k.c, k.h, k.w}, dt::u8, dnnl::memory::format_tag::nhwc),
      dst({k.n, k.c, oh, ow}, k.out, dnnl::memory::format_tag::nhwc);
  FusedPostOps post;
  post.relu = k.relu;
  post.relu_slope = k.slope;
  post.relu_max = k.top;
  ASSERT_TRUE(DwInt8Conv::applies(3, 3, k.stride, k.stride, 1, 1, k.c, shape, src, dst, post));

  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255), level(-127, 127);
  std::vector<uint8_t> x(static_cast<size_t>(k.n * k.h * k.w * k.c));
  for (auto& v : x) v = static_cast<uint8_t>(byte(rng));
  std::vector<int8_t> w(static_cast<size_t>(k.c * 9));
  for (auto& v : w) v = static_cast<int8_t>(level(rng));
  std::vector<float> bias(static_cast<size_t>(k.c)), scale(static_cast<size_t>(k.c));
  for (int64_t ch = 0; ch < k.c; ++ch) {
    bias[ch] = static_cast<float>(level(rng)) * 37.5f;  // accumulator units
    // Int8 destinations: a scale that spreads outputs over the levels and past them (saturation).
    scale[ch] = (k.out == dt::f32 ? 1e-3f : 4e-3f) * (1.f + 0.1f * static_cast<float>(ch % 5));
  }
  DwInt8Conv conv(shape, k.out, post);
  conv.set_weights(w.data(), k.bias ? bias.data() : nullptr, scale.data());
  const size_t outputs = static_cast<size_t>(k.n * oh * ow * k.c);
  std::vector<float> got_f(outputs);
  std::vector<uint8_t> got_b(outputs);
  conv.forward(x.data(), k.out == dt::f32 ? static_cast<void*>(got_f.data()) : got_b.data());

  size_t wrong = 0, saturated = 0;
  std::string first;
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xo = 0; xo < ow; ++xo)
        for (int64_t ch = 0; ch < k.c; ++ch) {
          int32_t acc = 0;
          for (int64_t u = 0; u < 3; ++u)
            for (int64_t v = 0; v < 3; ++v) {
              const int64_t iy = y * k.stride - k.pad + u, ix = xo * k.stride - k.pad + v;
              if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
              acc += int32_t{x[((i * k.h + iy) * k.w + ix) * k.c + ch]} * int32_t{w[ch * 9 + u * 3 + v]};
            }
          float r = (static_cast<float>(acc) + (k.bias ? bias[ch] : 0.f)) * scale[ch];
          if (k.relu && r < 0.f) r *= k.slope;
          if (post.bounded()) r = std::min(r, k.top);
          const size_t at = static_cast<size_t>(((i * oh + y) * ow + xo) * k.c + ch);
          bool ok;
          if (k.out == dt::f32) {
            ok = got_f[at] == r;
          } else {
            const float lo = k.out == dt::u8 ? 0.f : -128.f, hi = k.out == dt::u8 ? 255.f : 127.f;
            const float q = std::clamp(std::nearbyint(r), lo, hi);
            saturated += q == lo || q == hi;
            const int have = k.out == dt::u8 ? int{got_b[at]} : int{static_cast<int8_t>(got_b[at])};
            ok = have == static_cast<int>(q);
          }
          if (!ok && wrong++ == 0)
            first = fmt::format("item {} row {} column {} channel {}: want {}", i, y, xo, ch, r);
        }
  EXPECT_EQ(wrong, 0u) << "of " << outputs << "; first " << first;
  if (k.out != dt::f32) {
    EXPECT_GT(saturated, 0u) << "the scales should reach the saturation";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DwInt8Test,
    ::testing::Values(DwInt8Case{1, 16, 8, 8, 1, 1, dnnl::memory::data_type::u8, true, true, 0.f},
                      DwInt8Case{2, 24, 13, 11, 1, 1, dnnl::memory::data_type::u8, true, true, 0.f},
                      DwInt8Case{2, 40, 15, 15, 2, 1, dnnl::memory::data_type::s8, true, false, 0.f},
                      DwInt8Case{1, 32, 5, 6, 1, 1, dnnl::memory::data_type::f32, false, true, 0.1f},
                      DwInt8Case{3, 48, 20, 19, 2, 1, dnnl::memory::data_type::u8, false, true, 0.f},
                      DwInt8Case{1, 8, 9, 30, 1, 2, dnnl::memory::data_type::s8, true, true, 0.25f},
                      DwInt8Case{1, 64, 7, 7, 1, 0, dnnl::memory::data_type::f32, true, false, 0.f},
                      DwInt8Case{2, 17, 12, 12, 2, 2, dnnl::memory::data_type::u8, true, false, 0.f},
                      DwInt8Case{2, 32, 14, 14, 1, 1, dnnl::memory::data_type::u8, true, true, 0.f, 100.f},
                      DwInt8Case{1, 24, 11, 9, 2, 1, dnnl::memory::data_type::f32, true, true, 0.f, 0.5f}),
    [](const auto& info) { return fmt::format("case{}", info.index); });

TEST(DwInt8Conv, AppliesOnlyToU8Depthwise3x3ChannelsLastWithoutResidual) {
  if (!DwInt8Conv::cpu_supported()) {
    GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  }
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const DwInt8Shape s{1, 16, 10, 10, 10, 10, 1, 1, 1};
  const dnnl::memory::desc u8({1, 16, 10, 10}, dt::u8, tag::nhwc), s8({1, 16, 10, 10}, dt::s8, tag::nhwc),
      f32({1, 16, 10, 10}, dt::f32, tag::nhwc), blocked({1, 16, 10, 10}, dt::u8, tag::nChw16c);
  FusedPostOps relu, sum, six;
  relu.relu = true;
  sum.residual_sum = true;
  six.relu = true;
  six.relu_max = 6.f;
  EXPECT_TRUE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, u8, u8, relu));
  EXPECT_TRUE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, u8, f32, relu));
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, s8, u8, relu));       // signed source
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, blocked, u8, relu));  // not channels-last
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 8, s, u8, u8, relu));        // not depthwise
  EXPECT_FALSE(DwInt8Conv::applies(5, 5, 1, 1, 1, 1, 16, s, u8, u8, relu));
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 2, 1, 1, 16, s, u8, u8, relu));
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 1, 2, 2, 16, s, u8, u8, relu));
  EXPECT_TRUE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, u8, u8, six));
  EXPECT_FALSE(DwInt8Conv::applies(3, 3, 1, 1, 1, 1, 16, s, u8, u8, sum));
}
}  // namespace
}  // namespace bks::test
