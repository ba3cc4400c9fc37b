// Pooling: Caffe's MAX and AVE (including its ceil rounding and divisor rules) against a
// direct loop; backward by finite differences. SPP (spatial pyramid pooling) the same way.
// The forks' resampling layers: Upsample (max unpooling) and Interp (bilinear).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <string>

#include "op_harness.h"
#include "ops/pooling_blocked.h"
#include "ops/pooling_tiled.h"

namespace bks::test {
namespace {

struct PoolCase {
  bool max;
  int n, c, h, w, k, s, p;
};

Tensor naive_pool(const Tensor& x, const PoolCase& pc) {
  int64_t oh = static_cast<int64_t>(std::ceil(static_cast<double>(pc.h + 2 * pc.p - pc.k) / pc.s)) + 1;
  int64_t ow = static_cast<int64_t>(std::ceil(static_cast<double>(pc.w + 2 * pc.p - pc.k) / pc.s)) + 1;
  if (pc.p > 0) {
    if ((oh - 1) * pc.s >= pc.h + pc.p) --oh;
    if ((ow - 1) * pc.s >= pc.w + pc.p) --ow;
  }
  Tensor y({pc.n, pc.c, oh, ow});
  for (int n = 0; n < pc.n; ++n)
    for (int c = 0; c < pc.c; ++c)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t hs = i * pc.s - pc.p, ws = j * pc.s - pc.p;
          int64_t he = std::min<int64_t>(hs + pc.k, pc.h + pc.p), we = std::min<int64_t>(ws + pc.k, pc.w + pc.p);
          int64_t size = (he - hs) * (we - ws);
          hs = std::max<int64_t>(hs, 0);
          ws = std::max<int64_t>(ws, 0);
          he = std::min<int64_t>(he, pc.h);
          we = std::min<int64_t>(we, pc.w);
          double acc = pc.max ? -FLT_MAX : 0.0;
          for (int64_t a = hs; a < he; ++a)
            for (int64_t b = ws; b < we; ++b) {
              float v = at4(x, n, c, a, b);
              acc = pc.max ? std::max<double>(acc, v) : acc + v;
            }
          y.f32()[((n * pc.c + c) * oh + i) * ow + j] = static_cast<float>(pc.max ? acc : acc / size);
        }
  return y;
}

std::string pool_text(const PoolCase& pc) {
  return fmt::format("type: 'Pooling' pooling_param {{ pool: {} kernel_size: {} stride: {} pad: {} }}",
                     pc.max ? "MAX" : "AVE", pc.k, pc.s, pc.p);
}

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, ForwardMatchesCaffeRule) {
  const auto& pc = GetParam();
  OpHarness h(pool_text(pc), {{pc.n, pc.c, pc.h, pc.w}});
  h.forward();
  expect_close(h.out[0], naive_pool(h.in[0], pc), 1e-5f, h.op().kernel_name());
}

TEST_P(PoolTest, GradientsMatchFiniteDifferences) {
  const auto& pc = GetParam();
  OpHarness h(pool_text(pc), {{pc.n, pc.c, pc.h, pc.w}});
  // Distinct, well-separated values so max pooling has no ties within the step.
  for (int64_t i = 0; i < h.in[0].numel(); ++i) h.in[0].f32()[i] = static_cast<float>((i * 7919) % 997) * 0.01f;
  h.check_gradients(1e-3f, 1e-2f);
}

// The channels-last kernel (used when a convolution hands over NHWC data) follows the
// same Caffe rules. Input in NHWC, output converted to plain.
TEST_P(PoolTest, ChannelsLastKernelMatchesCaffeRule) {
  const auto& pc = GetParam();
  auto nhwc = [&](Kernel& op) {
    op.set_layouts(
        {dnnl::memory::desc({pc.n, pc.c, pc.h, pc.w}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc)},
        {dnnl::memory::desc()});
  };
  OpHarness h(pool_text(pc), {{pc.n, pc.c, pc.h, pc.w}}, proto::TRAIN, 1, nhwc);
  EXPECT_NE(h.op().kernel_name().find("channels-last"), std::string::npos) << h.op().kernel_name();
  bool tiles = pc.max && pc.k == pc.s && pc.p == 0 && pc.h % pc.k == 0 && pc.w % pc.k == 0 && pc.c >= 8;
  EXPECT_EQ(h.op().kernel_name().find("tiled") != std::string::npos, tiles) << h.op().kernel_name();
  for (int64_t i = 0; i < h.in[0].numel(); ++i) h.in[0].f32()[i] = static_cast<float>((i * 7919) % 997) * 0.01f;
  // The same logical tensor in NCHW for the reference.
  Tensor logical({pc.n, pc.c, pc.h, pc.w});
  for (int n = 0; n < pc.n; ++n)
    for (int c = 0; c < pc.c; ++c)
      for (int y = 0; y < pc.h; ++y)
        for (int x = 0; x < pc.w; ++x)
          logical.f32()[((n * pc.c + c) * pc.h + y) * pc.w + x] = h.in[0].f32()[((n * pc.h + y) * pc.w + x) * pc.c + c];
  h.forward();
  expect_close(h.out[0], naive_pool(logical, pc), 1e-5f, "channels-last");
  h.check_gradients(1e-3f, 1e-2f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Values(PoolCase{true, 2, 3, 8, 8, 2, 2, 0}, PoolCase{true, 1, 2, 7, 9, 3, 2, 0},
                                           PoolCase{true, 1, 2, 7, 7, 3, 2, 1}, PoolCase{false, 2, 2, 8, 8, 3, 2, 0},
                                           PoolCase{false, 1, 3, 7, 6, 3, 2, 1}, PoolCase{false, 1, 1, 6, 6, 2, 2, 1},
                                           PoolCase{false, 1, 2, 5, 5, 3, 1, 1},
                                           // Windows tiling the input with 8+ channels: the
                                           // tiled channels-last kernel, with overlapping
                                           // last channel blocks (20 = 16 + 4, 9 = 8 + 1).
                                           PoolCase{true, 2, 20, 6, 6, 2, 2, 0}, PoolCase{true, 1, 9, 6, 9, 3, 3, 0}));

TEST(Pooling, GlobalAverageCoversTheWholePlane) {
  OpHarness h("type: 'Pooling' pooling_param { pool: AVE global_pooling: true }", {{2, 3, 5, 4}});
  h.forward();
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 3, 1, 1}));
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 4; ++j) s += at4(h.in[0], n, c, i, j);
      EXPECT_NEAR(h.out[0].f32()[n * 3 + c], s / 20, 1e-5);
    }
}

// Expects building the layer to throw InputError whose message contains `needle`.
void expect_layer_error(const std::string& layer, const std::vector<Shape>& in, const std::string& needle,
                        int outputs = 1) {
  try {
    OpHarness h(layer, in, proto::TRAIN, outputs);
    h.forward();
    FAIL() << "no error for: " << layer;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The forks' ceil_mode: false rounds the output size down (8 - 3) / 2 + 1 = 3, true up to 4.
TEST(Pooling, CeilModeIsRoundMode) {
  for (bool ceil : {false, true}) {
    OpHarness h(fmt::format("type: 'Pooling' pooling_param {{ pool: MAX kernel_size: 3 stride: 2 ceil_mode: {} }}", ceil),
                {{1, 2, 8, 8}});
    h.forward();
    EXPECT_EQ(h.out[0].shape(), (Shape{1, 2, ceil ? 4 : 3, ceil ? 4 : 3}));
  }
  OpHarness agree("type: 'Pooling' pooling_param { pool: AVE kernel_size: 3 stride: 2 ceil_mode: false round_mode: FLOOR }",
                  {{1, 1, 8, 8}});
  EXPECT_EQ(agree.out[0].dim(2), 3);
  expect_layer_error("type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 stride: 2 ceil_mode: true round_mode: FLOOR }",
                     {{1, 1, 8, 8}}, "ceil_mode and round_mode disagree");
}

// A second top holds each winner's index within its (n, c) plane, as a float (Caffe's
// top_mask), with padding and a ceil overhang.
TEST(Pooling, MaxMaskTopHoldsTheWinnersIndex) {
  const int64_t H = 7, W = 6, k = 3, s = 2, p = 1;
  OpHarness h(fmt::format("type: 'Pooling' pooling_param {{ pool: MAX kernel_size: {} stride: {} pad: {} }}", k, s, p),
              {{2, 3, H, W}}, proto::TRAIN, 2);
  h.randomize_inputs(-1, 1, 3);
  h.forward();
  ASSERT_EQ(h.out[1].shape(), h.out[0].shape());
  const int64_t oh = h.out[0].dim(2), ow = h.out[0].dim(3);
  for (int64_t pl = 0; pl < 6; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = -1;
        for (int64_t a = std::max<int64_t>(i * s - p, 0); a < std::min(i * s - p + k, H); ++a)
          for (int64_t b = std::max<int64_t>(j * s - p, 0); b < std::min(j * s - p + k, W); ++b)
            if (best < 0 || h.in[0].f32()[pl * H * W + a * W + b] > h.in[0].f32()[pl * H * W + best]) best = a * W + b;
        int64_t o = (pl * oh + i) * ow + j;
        ASSERT_EQ(h.out[1].f32()[o], static_cast<float>(best)) << "plane " << pl << " at " << i << "," << j;
        ASSERT_EQ(h.out[0].f32()[o], h.in[0].f32()[pl * H * W + best]);
      }
  EXPECT_EQ(h.op().kernel_name(), "reference loops");  // the kernel that writes masks
  h.check_gradients();
  expect_layer_error("type: 'Pooling' pooling_param { pool: AVE kernel_size: 2 stride: 2 }", {{1, 1, 4, 4}},
                     "a second top (the argmax mask) needs pool: MAX", 2);
}

// Upsample from a real pooling mask: every winner goes back to its place, all else is zero;
// the gradient flows back from those places.
TEST(Upsample, UnpoolsAtTheMaskAndGathersTheGradient) {
  OpHarness pool("type: 'Pooling' pooling_param { pool: MAX kernel_size: 2 stride: 2 }", {{2, 3, 5, 7}}, proto::TRAIN,
                 2);
  pool.randomize_inputs(-1, 1, 5);
  pool.forward();
  // Ceil rounding pools 5 x 7 to 3 x 4; upsample_h/upsample_w restore 5 x 7.
  const int64_t ph = pool.out[0].dim(2), pw = pool.out[0].dim(3);
  OpHarness up("type: 'Upsample' upsample_param { upsample_h: 5 upsample_w: 7 }", {{2, 3, ph, pw}, {2, 3, ph, pw}});
  up.in[0].copy_from(pool.out[0]);
  up.in[1].copy_from(pool.out[1]);
  up.forward();
  ASSERT_EQ(up.out[0].shape(), (Shape{2, 3, 5, 7}));
  for (int64_t pl = 0; pl < 6; ++pl) {
    std::vector<double> expect(35, 0.0);
    for (int64_t i = 0; i < ph * pw; ++i)
      expect[static_cast<int64_t>(pool.out[1].f32()[pl * ph * pw + i])] = pool.out[0].f32()[pl * ph * pw + i];
    for (int64_t i = 0; i < 35; ++i) ASSERT_EQ(up.out[0].f32()[pl * 35 + i], expect[i]) << pl << " " << i;
  }
  up.check_gradients(1e-3f, 1e-2f, {0});
  EXPECT_FALSE(up.can_propagate_to(1)) << "the mask takes no gradient";
}

TEST(Upsample, ScaleAndPadOutGiveTheOutputSize) {
  OpHarness a("type: 'Upsample' upsample_param { scale: 2 }", {{1, 2, 3, 4}, {1, 2, 3, 4}});
  EXPECT_EQ(a.out[0].shape(), (Shape{1, 2, 6, 8}));
  OpHarness b("type: 'Upsample' upsample_param { scale_h: 2 scale_w: 3 pad_out_h: true }", {{1, 2, 3, 4}, {1, 2, 3, 4}});
  EXPECT_EQ(b.out[0].shape(), (Shape{1, 2, 5, 12}));
}

TEST(Upsample, BadFieldsAndMasksAreNamed) {
  Shape s{1, 1, 2, 2};
  expect_layer_error("type: 'Upsample' upsample_param { upsample_h: 4 }", {s, s}, "upsample_h and upsample_w together");
  expect_layer_error("type: 'Upsample' upsample_param { scale_h: 2 }", {s, s}, "scale_h and scale_w together");
  expect_layer_error("type: 'Upsample' upsample_param { scale: 1 }", {s, s}, "upsample_param: scale must exceed 1");
  expect_layer_error("type: 'Upsample' upsample_param { scale: 3 pad_out_w: true }", {s, s},
                     "pad_out_h/pad_out_w need a scale of 2");
  expect_layer_error("type: 'Upsample' upsample_param { scale: 2 }", {s, {1, 1, 2, 3}}, "the mask (bottom 1)");
  OpHarness h("type: 'Upsample' upsample_param { scale: 2 }", {s, s});
  for (int i = 0; i < 4; ++i) h.in[1].f32()[i] = static_cast<float>(5 * i);
  h.in[1].f32()[2] = 16.f;  // the output plane is 4 x 4
  try {
    h.forward();
    FAIL() << "no error for a mask index past the plane";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mask index 16 is outside the output plane of 16"), std::string::npos)
        << e.what();
  }
}

void set_plane(Tensor& t, std::initializer_list<float> v) { std::copy(v.begin(), v.end(), t.f32()); }

void expect_plane(const Tensor& t, std::initializer_list<float> want, const char* what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size())) << what;
  int i = 0;
  for (float w : want) {
    EXPECT_NEAR(t.f32()[i], w, 1e-5) << what << " at " << i;
    ++i;
  }
}

// Interp aligns the corners: 2 x 2 zoomed by 2 is 3 x 3 with the input at the corners, the
// edges' means between them and the four's mean in the middle.
TEST(Interp, ZoomAlignsCornersAndInterpolatesBetween) {
  OpHarness h("type: 'Interp' interp_param { zoom_factor: 2 }", {{1, 1, 2, 2}});
  ASSERT_EQ(h.out[0].shape(), (Shape{1, 1, 3, 3}));
  set_plane(h.in[0], {1, 5, 3, 11});
  h.forward();
  expect_plane(h.out[0], {1, 3, 5, 2, 5, 8, 3, 7, 11}, "zoomed");
  // Backward is the adjoint: the middle's gradient splits four ways, (0, 1)'s two ways.
  h.out_grad[0].zero();
  h.out_grad[0].f32()[4] = 4;
  h.out_grad[0].f32()[1] = 2;
  h.backward();
  expect_plane(h.in_grad[0], {2, 2, 1, 1}, "gradient");
  h.check_gradients();
}

// Output row i samples input row i (in - 1) / (out - 1): 3 rows to 2 read rows 0 and 2 (the
// middle one not at all); 2 columns to 4 read columns 0, 1/3, 2/3 and 1.
TEST(Interp, SizeGivenSamplesAtTheAlignedPositions) {
  OpHarness h("type: 'Interp' interp_param { height: 2 width: 4 }", {{1, 1, 3, 2}});
  ASSERT_EQ(h.out[0].shape(), (Shape{1, 1, 2, 4}));
  set_plane(h.in[0], {0, 6, 100, 200, 9, 3});
  h.forward();
  expect_plane(h.out[0], {0, 2, 4, 6, 9, 7, 5, 3}, "resized");
  h.check_gradients();
}

// pad_beg and pad_end crop the input first: 4 x 4 less one row and column each side is the
// middle 2 x 2, which zooms to 3 x 3.
TEST(Interp, NegativePadsCropBeforeResizing) {
  OpHarness h("type: 'Interp' interp_param { zoom_factor: 2 pad_beg: -1 pad_end: -1 }", {{1, 1, 4, 4}});
  ASSERT_EQ(h.out[0].shape(), (Shape{1, 1, 3, 3}));
  for (int i = 0; i < 16; ++i) h.in[0].f32()[i] = static_cast<float>(i);
  h.forward();
  expect_plane(h.out[0], {5, 5.5f, 6, 7, 7.5f, 8, 9, 9.5f, 10}, "cropped and zoomed");
  h.check_gradients();
  for (int i : {0, 1, 2, 3, 4, 7, 8, 11, 12, 13, 14, 15}) EXPECT_EQ(h.in_grad[0].f32()[i], 0.f) << "cropped " << i;
  // Cropped to the output's size, the plane is copied.
  OpHarness same("type: 'Interp' interp_param { height: 2 width: 3 pad_end: -1 }", {{1, 1, 3, 4}});
  for (int i = 0; i < 12; ++i) same.in[0].f32()[i] = static_cast<float>(i);
  same.forward();
  expect_plane(same.out[0], {0, 1, 2, 4, 5, 6}, "copied");
}

// The fork's order: one factor alone wins over height/width, which win over both factors;
// (in - 1) / shrink + 1 rounds down.
TEST(Interp, OutputSizeFollowsTheForksPrecedence) {
  auto size = [](const std::string& p, Shape in) {
    return OpHarness("type: 'Interp' interp_param { " + p + " }", {in}).out[0].shape();
  };
  EXPECT_EQ(size("zoom_factor: 3", {1, 2, 4, 5}), (Shape{1, 2, 10, 13}));
  EXPECT_EQ(size("shrink_factor: 2", {1, 2, 8, 9}), (Shape{1, 2, 4, 5}));
  EXPECT_EQ(size("shrink_factor: 2 zoom_factor: 4", {1, 2, 8, 9}), (Shape{1, 2, 13, 17}));
  EXPECT_EQ(size("zoom_factor: 2 height: 10 width: 11", {1, 2, 4, 5}), (Shape{1, 2, 7, 9}));
  EXPECT_EQ(size("shrink_factor: 2 zoom_factor: 2 height: 10 width: 11", {1, 2, 4, 5}), (Shape{1, 2, 10, 11}));
  // A second bottom gives the size (and takes no gradient).
  OpHarness two("type: 'Interp'", {{2, 3, 4, 4}, {2, 1, 6, 7}});
  EXPECT_EQ(two.out[0].shape(), (Shape{2, 3, 6, 7}));
  EXPECT_FALSE(two.can_propagate_to(1));
}

TEST(Interp, BadFieldsAreNamed) {
  Shape s{1, 1, 4, 4};
  expect_layer_error("type: 'Interp'", {s}, "interp_param needs height and width, zoom_factor or shrink_factor");
  expect_layer_error("type: 'Interp' interp_param { height: 5 }", {s}, "interp_param needs height and width");
  expect_layer_error("type: 'Interp' interp_param { zoom_factor: 0 }", {s},
                     "interp_param.zoom_factor must be at least 1");
  expect_layer_error("type: 'Interp' interp_param { zoom_factor: 2 pad_beg: 1 }", {s}, "must not be positive");
  expect_layer_error("type: 'Interp' interp_param { zoom_factor: 2 pad_beg: -2 pad_end: -2 }", {s},
                     "crop all of the 4x4 input");
  expect_layer_error("type: 'Interp' interp_param { height: 2 width: 2 }", {s, s}, "ambiguous");
  expect_layer_error("type: 'Interp'", {s, {2, 1, 4, 4}}, "must have the batch of bottom 0");
  expect_layer_error("type: 'Interp' interp_param { zoom_factor: 2 }", {{1, 4, 4}}, "bottom 0 must be 4-d");
}

TEST(Pooling, RejectsStochasticAndMissingKernel) {
  EXPECT_THROW(OpHarness("type: 'Pooling' pooling_param { pool: STOCHASTIC kernel_size: 2 }", {{1, 1, 4, 4}}),
               InputError);
  EXPECT_THROW(OpHarness("type: 'Pooling' pooling_param { pool: MAX }", {{1, 1, 4, 4}}), InputError);
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// The tiled kernel reading oneDNN's channel-blocked layout (what a first-layer convolution
// writes) gives the same pooled values and winners as from NHWC, and its backward fills
// the blocked gradient, padding channels included (zero).
TEST(PoolingTiled, BlockedInputMatchesChannelsLast) {
  for (int64_t block : {16, 8}) {
    const int64_t n = 2, c = 20, h = 6, w = 4, kh = 2, kw = 2, oh = h / kh, ow = w / kw;
    const int64_t blocks = (c + block - 1) / block;
    std::vector<float> nhwc(n * h * w * c), blocked(n * blocks * h * w * block, 0.f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            float v = static_cast<float>(((i * 131 + ch * 31 + y * 7 + x * 3) * 7919) % 997) * 0.01f;
            nhwc[((i * h + y) * w + x) * c + ch] = v;
            blocked[(((i * blocks + ch / block) * h + y) * w + x) * block + ch % block] = v;
          }
    PoolTiling from_nhwc{n, c, oh, ow, kh, kw, 0}, from_blocked{n, c, oh, ow, kh, kw, block};
    ASSERT_TRUE(pool_tiled_applies(c, block));
    std::vector<float> y1(n * oh * ow * c), y2(y1.size());
    std::vector<int32_t> t1(y1.size()), t2(y1.size());
    pool_tiled_max_forward(from_nhwc, nhwc.data(), y1.data(), t1.data());
    pool_tiled_max_forward(from_blocked, blocked.data(), y2.data(), t2.data());
    EXPECT_EQ(y1, y2) << "block " << block;
    EXPECT_EQ(t1, t2) << "block " << block;

    std::vector<float> dy(y1.size());
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i % 13) - 6.f;
    std::vector<float> dx1(nhwc.size(), NAN), dx2(blocked.size(), NAN);
    pool_tiled_max_backward(from_nhwc, dy.data(), t1.data(), dx1.data());
    pool_tiled_max_backward(from_blocked, dy.data(), t2.data(), dx2.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < blocks * block; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            float b = dx2[(((i * blocks + ch / block) * h + y) * w + x) * block + ch % block];
            float expect = ch < c ? dx1[((i * h + y) * w + x) * c + ch] : 0.f;
            ASSERT_EQ(b, expect) << "block " << block << " n " << i << " c " << ch << " y " << y << " x " << x;
          }
  }
}

// The blocked inference kernel follows Caffe's MAX rule (padding never wins, ceil-mode
// windows clipped) for overlapping windows, padding and channel counts that pad the last
// block, in nChw8c and nChw16c.
TEST(PoolingBlocked, MatchesCaffeRule) {
  const PoolCase cases[] = {{true, 2, 20, 9, 9, 3, 2, 0}, {true, 1, 9, 7, 7, 3, 2, 1}, {true, 1, 16, 8, 6, 3, 1, 1},
                            {true, 1, 8, 12, 12, 3, 2, 0}, {true, 2, 5, 6, 6, 2, 2, 0}, {true, 1, 24, 5, 7, 5, 3, 2}};
  for (const PoolCase& pc : cases)
    for (int64_t block : {8, 16}) {
      Tensor x({pc.n, pc.c, pc.h, pc.w});
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>((i * 7919) % 997) * 0.01f - 5.f;
      Tensor want = naive_pool(x, pc);
      const int64_t blocks = (pc.c + block - 1) / block, oh = want.shape()[2], ow = want.shape()[3];
      std::vector<float> in(static_cast<size_t>(pc.n * blocks * block * pc.h * pc.w), 0.f);
      for (int64_t n = 0; n < pc.n; ++n)
        for (int64_t c = 0; c < pc.c; ++c)
          for (int64_t y = 0; y < pc.h; ++y)
            for (int64_t xx = 0; xx < pc.w; ++xx)
              in[static_cast<size_t>((((n * blocks + c / block) * pc.h + y) * pc.w + xx) * block + c % block)] =
                  at4(x, static_cast<int>(n), static_cast<int>(c), y, xx);
      std::vector<float> out(static_cast<size_t>(pc.n * blocks * block * oh * ow), NAN);
      pool_blocked_max_forward({pc.n, pc.c, pc.h, pc.w, oh, ow, pc.k, pc.k, pc.s, pc.s, pc.p, pc.p, block}, in.data(),
                               out.data());
      for (int64_t n = 0; n < pc.n; ++n)
        for (int64_t c = 0; c < pc.c; ++c)
          for (int64_t y = 0; y < oh; ++y)
            for (int64_t xx = 0; xx < ow; ++xx)
              ASSERT_EQ(out[static_cast<size_t>((((n * blocks + c / block) * oh + y) * ow + xx) * block + c % block)],
                        want.f32()[((n * pc.c + c) * oh + y) * ow + xx])
                  << "k " << pc.k << " s " << pc.s << " p " << pc.p << " block " << block << " at " << n << "," << c
                  << "," << y << "," << xx;
    }
}

// An inference max pooling handed a blocked input runs that kernel and writes the same layout.
TEST(PoolingBlocked, ChosenForABlockedInputAtInference) {
  const dnnl::memory::dims d{1, 16, 9, 9};
  auto blocked = [&](Kernel& op) {
    op.set_layouts({dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw8c)},
                   {dnnl::memory::desc()});
  };
  OpHarness h("type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 stride: 2 }", {{1, 16, 9, 9}}, proto::TEST, 1,
              blocked);
  EXPECT_EQ(h.op().kernel_name(), "bakusoku nChw8c max");
  const auto out = h.op().preferred_output_layout(
      0, {dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw8c)});
  EXPECT_EQ(out, dnnl::memory::desc({1, 16, 4, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw8c));
}

// Caffe's SPP, level by level: bins = 2^l, window ceil(H / bins), stride the window, pad
// (window * bins - H + 1) / 2; Caffe's pooling output rule; AVE divides by the window clipped
// to the padded plane. Levels flattened per item, in order.
std::vector<double> naive_spp(const Tensor& x, int levels, bool max) {
  int64_t n = x.dim(0), c = x.dim(1), H = x.dim(2), W = x.dim(3);
  std::vector<std::vector<double>> items(static_cast<size_t>(n));
  for (int l = 0; l < levels; ++l) {
    double bins = std::pow(2.0, l);
    auto axis = [&](int64_t in, int64_t& k, int64_t& pad, int64_t& out) {
      k = static_cast<int64_t>(std::ceil(static_cast<double>(in) / bins));
      pad = (k * static_cast<int64_t>(bins) - in + 1) / 2;
      out = static_cast<int64_t>(std::ceil(static_cast<double>(in + 2 * pad - k) / static_cast<double>(k))) + 1;
      if (pad > 0 && (out - 1) * k >= in + pad) --out;
    };
    int64_t kh, ph, oh, kw, pw, ow;
    axis(H, kh, ph, oh);
    axis(W, kw, pw, ow);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            int64_t y0 = oy * kh - ph, x0 = ox * kw - pw;
            int64_t y1 = std::min(y0 + kh, H + ph), x1 = std::min(x0 + kw, W + pw);
            double size = static_cast<double>((y1 - y0) * (x1 - x0)), best = -INFINITY, sum = 0;
            for (int64_t i = std::max<int64_t>(y0, 0); i < std::min(y1, H); ++i)
              for (int64_t j = std::max<int64_t>(x0, 0); j < std::min(x1, W); ++j) {
                best = std::max<double>(best, at4(x, b, ch, i, j));
                sum += at4(x, b, ch, i, j);
              }
            items[b].push_back(max ? best : sum / size);
          }
  }
  std::vector<double> all;
  for (auto& it : items) all.insert(all.end(), it.begin(), it.end());
  return all;
}

void expect_spp(OpHarness& h, int levels, bool max) {
  h.forward();
  std::vector<double> want = naive_spp(h.in[0], levels, max);
  ASSERT_EQ(static_cast<size_t>(h.out[0].numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(h.out[0].f32()[i], want[i], 1e-5) << "element " << i;
}

TEST(SPP, MaxAndAveragePyramids) {
  for (bool max : {true, false}) {
    SCOPED_TRACE(max ? "MAX" : "AVE");
    std::string pool = max ? "MAX" : "AVE";
    OpHarness h("type: 'SPP' spp_param { pyramid_height: 3 pool: " + pool + " }", {{2, 3, 7, 6}});
    ASSERT_EQ(h.out[0].shape(), (Shape{2, 3 * (1 + 4 + 16)}));
    for (int64_t i = 0; i < h.in[0].numel(); ++i)  // distinct values: no ties within a step
      h.in[0].f32()[i] = static_cast<float>((i * 7919) % 997) * 0.01f - 5.f;
    expect_spp(h, 3, max);
    h.check_gradients();
    // One level is Caffe's pooled blob itself, still 4-d.
    OpHarness one("type: 'SPP' spp_param { pyramid_height: 1 pool: " + pool + " }", {{2, 3, 5, 4}});
    ASSERT_EQ(one.out[0].shape(), (Shape{2, 3, 1, 1}));
    expect_spp(one, 1, max);
  }
}

TEST(SPP, BadParameters) {
  auto expect_error_naming = [](const std::string& layer, const Shape& in, const std::string& field) {
    try {
      OpHarness h(layer, {in});
      ADD_FAILURE() << layer << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_error_naming("type: 'SPP'", {1, 2, 8, 8}, "spp_param.pyramid_height");
  // A 5-wide plane in 4 bins would pad 2 around a 2-wide window, which Caffe refuses.
  expect_error_naming("type: 'SPP' spp_param { pyramid_height: 3 }", {1, 2, 8, 5}, "spp_param.pyramid_height");
  expect_error_naming("type: 'SPP' spp_param { pyramid_height: 2 pool: STOCHASTIC }", {1, 2, 8, 8}, "spp_param.pool");
  expect_error_naming("type: 'SPP' spp_param { pyramid_height: 2 }", {2, 8, 8}, "(N, C, H, W)");
}

}  // namespace
}  // namespace bks::test
