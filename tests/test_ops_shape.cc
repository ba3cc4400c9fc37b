// Data-movement ops (Flatten, Reshape, Concat, Slice, StridedSlice, Crop, Split, Silence,
// Tile, BatchReindex, Im2col, ShuffleChannel), Parameter, Eltwise, Arithmetic, Axpy,
// Reduction and ArgMax.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "op_harness.h"

namespace bks::test {
namespace {

TEST(Flatten, ShapesAndGradient) {
  OpHarness h("type: 'Flatten'", {{2, 3, 4, 5}});
  EXPECT_EQ(h.out[0].shape(), (Shape{2, 60}));
  h.check_gradients();
  OpHarness p("type: 'Flatten' flatten_param { axis: 1 end_axis: 2 }", {{2, 3, 4, 5}});
  EXPECT_EQ(p.out[0].shape(), (Shape{2, 12, 5}));
}

TEST(Reshape, CopyAndInferDims) {
  OpHarness h("type: 'Reshape' reshape_param { shape { dim: 0 dim: -1 dim: 2 } }", {{2, 3, 4}});
  EXPECT_EQ(h.out[0].shape(), (Shape{2, 6, 2}));
  h.forward();
  expect_close(h.out[0].view(h.in[0].shape()), h.in[0], 0.f, "reshape keeps data");
  EXPECT_THROW(OpHarness("type: 'Reshape' reshape_param { shape { dim: 5 dim: -1 } }", {{2, 3}}), InputError);
  OpHarness a("type: 'Reshape' reshape_param { shape { dim: 2 dim: 2 } axis: 1 num_axes: 1 }", {{3, 4, 5}});
  EXPECT_EQ(a.out[0].shape(), (Shape{3, 2, 2, 5}));
}

TEST(Concat, JoinsAlongAxisAndSplitsGradient) {
  OpHarness h("type: 'Concat' concat_param { axis: 1 }", {{2, 3, 2}, {2, 1, 2}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 4, 2}));
  h.forward();
  EXPECT_EQ(h.out[0].f32()[0], h.in[0].f32()[0]);
  EXPECT_EQ(h.out[0].f32()[6], h.in[1].f32()[0]);
  EXPECT_EQ(h.out[0].f32()[8], h.in[0].f32()[6]);
  h.check_gradients();
  EXPECT_THROW(OpHarness("type: 'Concat'", {{2, 3}, {3, 3}}), InputError);
}

// Enough short runs (240 rows of 100 + 37 floats) that the threads share the rows: every
// element lands where it belongs, forward and backward.
TEST(Concat, ManyRowsCopiedByTheThreadsLandInPlace) {
  OpHarness h("type: 'Concat' concat_param { axis: 3 }", {{2, 3, 40, 100}, {2, 3, 40, 37}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 3, 40, 137}));
  h.randomize_inputs();
  h.forward();
  for (int64_t r = 0; r < 240; ++r)
    for (int64_t x = 0; x < 137; ++x) {
      const float want = x < 100 ? h.in[0].f32()[r * 100 + x] : h.in[1].f32()[r * 37 + x - 100];
      ASSERT_EQ(h.out[0].f32()[r * 137 + x], want) << r << " " << x;
    }
  for (int64_t i = 0; i < h.out_grad[0].numel(); ++i) h.out_grad[0].f32()[i] = static_cast<float>(i);
  h.backward();
  for (int64_t r = 0; r < 240; ++r) {
    ASSERT_EQ(h.in_grad[0].f32()[r * 100 + 99], static_cast<float>(r * 137 + 99)) << r;
    ASSERT_EQ(h.in_grad[1].f32()[r * 37], static_cast<float>(r * 137 + 100)) << r;
    ASSERT_EQ(h.in_grad[1].f32()[r * 37 + 36], static_cast<float>(r * 137 + 136)) << r;
  }
}

TEST(Slice, PointsAndEvenSplit) {
  OpHarness h("type: 'Slice' slice_param { axis: 1 slice_point: 1 slice_point: 3 }", {{2, 5}}, proto::TRAIN, 3);
  EXPECT_EQ(h.out[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(h.out[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(h.out[2].shape(), (Shape{2, 2}));
  h.forward();
  EXPECT_EQ(h.out[2].f32()[2], h.in[0].f32()[8]);
  h.check_gradients();
  OpHarness e("type: 'Slice' slice_param { axis: 0 }", {{4, 3}}, proto::TRAIN, 2);
  EXPECT_EQ(e.out[1].shape(), (Shape{2, 3}));
}

TEST(Crop, TakesOffsetWindowOfReferenceShape) {
  OpHarness h("type: 'Crop' crop_param { axis: 2 offset: 1 offset: 2 }", {{2, 2, 5, 6}, {2, 2, 3, 3}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 2, 3, 3}));
  h.forward();
  EXPECT_EQ(at4(h.out[0], 1, 1, 2, 2), at4(h.in[0], 1, 1, 3, 4));
  h.check_gradients(1e-3f, 1e-2f, {0});
}

TEST(Split, CopiesAndSumsGradients) {
  OpHarness h("type: 'Split'", {{3, 4}}, proto::TRAIN, 2);
  h.check_gradients();
}

TEST(Eltwise, SumProdMax) {
  OpHarness s("type: 'Eltwise' eltwise_param { operation: SUM coeff: 2 coeff: -1 }", {{2, 3}, {2, 3}});
  s.forward();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(s.out[0].f32()[i], 2 * s.in[0].f32()[i] - s.in[1].f32()[i], 1e-6);
  s.check_gradients();
  OpHarness p("type: 'Eltwise' eltwise_param { operation: PROD }", {{2, 3}, {2, 3}, {2, 3}});
  p.check_gradients();
  OpHarness m("type: 'Eltwise' eltwise_param { operation: MAX }", {{2, 3}, {2, 3}});
  m.forward();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(m.out[0].f32()[i], std::max(m.in[0].f32()[i], m.in[1].f32()[i]));
  m.check_gradients();
}

// The InputError a layer's definition raises for these bottoms ("no error" when none).
std::string error_of(const std::string& layer, const std::vector<Shape>& in) {
  try {
    OpHarness h(layer, in);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// x[:, 1:, ::-2] of a (2, 3, 5) bottom: ends beyond the axis clamp, a negative start counts
// from the end; the gradient is scattered back, zero where nothing was taken.
TEST(StridedSlice, StepsClampsAndNegativeBounds) {
  OpHarness h("type: 'StridedSlice' strided_slice_param { axis: 1 start: 1 end: 100 axis: -1 start: -1 end: -100 "
              "step: 1 step: -2 }",
              {{2, 3, 5}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 2, 3}));
  h.forward();
  int k = 0;
  for (int n = 0; n < 2; ++n)
    for (int c = 1; c < 3; ++c)
      for (int w = 4; w >= 0; w -= 2) EXPECT_EQ(h.out[0].f32()[k++], h.in[0].f32()[(n * 3 + c) * 5 + w]);
  EXPECT_FALSE(h.facts().backward_reads_input);
  h.check_gradients();
  OpHarness all("type: 'StridedSlice'", {{3, 4}});  // no axes: a copy
  all.forward();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(all.out[0].f32()[i], all.in[0].f32()[i]);
  EXPECT_NE(error_of("type: 'StridedSlice' strided_slice_param { axis: 0 start: 0 end: 2 step: 0 }", {{3, 4}})
                .find("strided_slice_param.step must not be 0"),
            std::string::npos);
  EXPECT_NE(error_of("type: 'StridedSlice' strided_slice_param { axis: 1 start: 3 end: 1 }", {{3, 4}})
                .find("strided_slice_param takes nothing of axis 1 (size 4): start 3, end 1, step 1"),
            std::string::npos);
  EXPECT_NE(error_of("type: 'StridedSlice' strided_slice_param { axis: 0 start: 0 }", {{3, 4}})
                .find("one start, end (and step, when any is given) per axis"),
            std::string::npos);
}

// a op b with NumPy broadcasting, both ways at once: (2, 3, 1) with (4,) is (2, 3, 4).
TEST(Arithmetic, BroadcastsAndSumsGradientsOverRepeats) {
  const char* ops[] = {"ADD", "SUB", "MUL", "DIV"};
  for (int op = 0; op < 4; ++op) {
    OpHarness h(fmt::format("type: 'Arithmetic' arithmetic_param {{ operation: {} }}", ops[op]), {{2, 3, 1}, {4}});
    ASSERT_EQ(h.out[0].shape(), (Shape{2, 3, 4}));
    for (int i = 0; i < 4; ++i) h.in[1].f32()[i] = 0.5f + 0.25f * static_cast<float>(i);  // divisors away from 0
    h.forward();
    for (int r = 0; r < 6; ++r)
      for (int i = 0; i < 4; ++i) {
        const double a = h.in[0].f32()[r], b = h.in[1].f32()[i];
        const double want = op == 0 ? a + b : op == 1 ? a - b : op == 2 ? a * b : a / b;
        EXPECT_NEAR(h.out[0].f32()[r * 4 + i], want, 1e-6) << ops[op];
      }
    EXPECT_EQ(h.facts().backward_reads_input, op >= 2) << ops[op];
    h.check_gradients();
  }
  OpHarness same("type: 'Arithmetic' arithmetic_param { operation: DIV }", {{3, 2}, {3, 2}});
  for (int i = 0; i < 6; ++i) same.in[1].f32()[i] += 2.f;
  same.check_gradients();
  EXPECT_NE(error_of("type: 'Arithmetic'", {{2, 3}, {4}}).find("bottoms (2,3) and (4) do not broadcast"),
            std::string::npos)
      << error_of("type: 'Arithmetic'", {{2, 3}, {4}});
}

TEST(Reduction, AllOperations) {
  for (const char* op : {"SUM", "ASUM", "SUMSQ", "MEAN"}) {
    OpHarness h(fmt::format("type: 'Reduction' reduction_param {{ operation: {} axis: 1 coeff: 0.5 }}", op),
                {{3, 4, 2}});
    ASSERT_EQ(h.out[0].shape(), (Shape{3})) << op;
    for (int64_t i = 0; i < h.in[0].numel(); ++i)
      if (std::fabs(h.in[0].f32()[i]) < 0.05f) h.in[0].f32()[i] += 0.1f;
    h.check_gradients(1e-3f, 1e-2f);
  }
  OpHarness m("type: 'Reduction' reduction_param { operation: MEAN }", {{2, 3}});
  m.forward();
  double s = 0;
  for (int i = 0; i < 6; ++i) s += m.in[0].f32()[i];
  EXPECT_NEAR(m.out[0].f32()[0], s / 6, 1e-6);
}

TEST(ArgMax, TopKIndicesAndValues) {
  OpHarness h("type: 'ArgMax' argmax_param { top_k: 2 out_max_val: true }", {{2, 4}});
  float x[] = {0.1f, 0.9f, 0.5f, 0.2f, 3, 1, 2, 0};
  std::copy(x, x + 8, h.in[0].f32());
  h.forward();
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 2, 2}));
  float want[] = {1, 2, 0.9f, 0.5f, 0, 2, 3, 2};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(h.out[0].f32()[i], want[i]);
}

// The InputError building the layer gives, which must name `field`.
void expect_error_naming(const std::string& layer, const std::vector<Shape>& in, const std::string& field) {
  try {
    OpHarness h(layer, in);
    ADD_FAILURE() << layer << " was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Tile, CopiesAlongTheAxisAndSumsGradients) {
  OpHarness h("type: 'Tile' tile_param { axis: 1 tiles: 3 }", {{2, 3, 2}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 9, 2}));
  h.forward();
  for (int o = 0; o < 2; ++o)
    for (int t = 0; t < 3; ++t)
      for (int c = 0; c < 3; ++c)
        for (int i = 0; i < 2; ++i)
          ASSERT_EQ(h.out[0].f32()[(o * 9 + t * 3 + c) * 2 + i], h.in[0].f32()[(o * 3 + c) * 2 + i]);
  h.check_gradients();
  OpHarness last("type: 'Tile' tile_param { axis: -1 tiles: 2 }", {{1, 3}});
  EXPECT_EQ(last.out[0].shape(), (Shape{1, 6}));
  last.check_gradients();
  expect_error_naming("type: 'Tile'", {{2, 3}}, "tile_param.tiles");
  expect_error_naming("type: 'Tile' tile_param { axis: 2 tiles: 2 }", {{2, 3}}, "tile_param.axis");
  // Checked before anything is allocated: the product does not fit in 64 bits.
  expect_error_naming("type: 'Tile' tile_param { axis: 0 tiles: 2147483647 }", {{int64_t{1} << 40}}, "overflow");
}

TEST(BatchReindex, PicksItemsAndAccumulatesGradients) {
  OpHarness h("type: 'BatchReindex'", {{4, 2, 3}, {5}});
  float idx[] = {3, 0, 3, 1, 3};  // item 2 is dropped, item 3 taken three times
  std::copy(idx, idx + 5, h.in[1].f32());
  ASSERT_EQ(h.out[0].shape(), (Shape{5, 2, 3}));
  h.forward();
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 6; ++k) ASSERT_EQ(h.out[0].f32()[i * 6 + k], h.in[0].f32()[static_cast<int>(idx[i]) * 6 + k]);
  h.check_gradients(1e-3f, 1e-2f, {0});
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(h.in_grad[0].f32()[2 * 6 + k], 0.f) << "a dropped item takes no gradient";
    double sum = 0;
    for (int i : {0, 2, 4}) sum += h.out_grad[0].f32()[i * 6 + k];
    EXPECT_NEAR(h.in_grad[0].f32()[3 * 6 + k], sum, 1e-6) << "a repeated item takes the sum";
  }
  h.in[1].f32()[1] = 4;
  EXPECT_THROW(h.forward(), RuntimeError);
  expect_error_naming("type: 'BatchReindex'", {{4, 2}, {5, 1}}, "bottom 1");
}

TEST(Parameter, OutputIsTheBlobAndItsGradientTheTops) {
  OpHarness h("type: 'Parameter' parameter_param { shape { dim: 2 dim: 3 } }", {});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 3}));
  ASSERT_EQ(h.params.size(), 1u);
  h.forward();
  expect_close(h.out[0], h.params[0], 0.f, "top is the blob");
  h.check_gradients();
  expect_error_naming("type: 'Parameter'", {}, "parameter_param.shape");
  expect_error_naming("type: 'Parameter' parameter_param { shape { dim: 2 dim: 0 } }", {}, "parameter_param.shape");
}

// Channel c of the input holds the value 10 c + i at position i, so each output channel
// names the input channel it came from.
void fill_by_channel(Tensor& t) {
  int64_t c = t.dim(1), sp = t.numel() / (t.dim(0) * c);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(10 * ((i / sp) % c) + i % sp);
}

TEST(ShuffleChannel, TransposesTheGroupsOfChannels) {
  // 6 channels as 2 groups of 3 (0 1 2 | 3 4 5) come out 0 3 1 4 2 5; as 3 groups of 2
  // (0 1 | 2 3 | 4 5), 0 2 4 1 3 5.
  for (auto [group, order] : {std::pair<int, std::vector<int>>{2, {0, 3, 1, 4, 2, 5}}, {3, {0, 2, 4, 1, 3, 5}}}) {
    OpHarness h(fmt::format("type: 'ShuffleChannel' shuffle_channel_param {{ group: {} }}", group), {{1, 6, 1, 2}});
    ASSERT_EQ(h.out[0].shape(), (Shape{1, 6, 1, 2}));
    fill_by_channel(h.in[0]);
    h.forward();
    for (int k = 0; k < 6; ++k)
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(h.out[0].f32()[k * 2 + i], 10 * order[k] + i) << "group " << group << ", output channel " << k;
    // Backward sends output channel k's gradient back to input channel order[k].
    fill_by_channel(h.out_grad[0]);
    h.backward();
    for (int k = 0; k < 6; ++k)
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(h.in_grad[0].f32()[order[k] * 2 + i], 10 * k + i) << "group " << group << ", channel " << k;
  }
  // group 1 (the default) keeps the order; the batch's items shuffle independently.
  OpHarness one("type: 'ShuffleChannel'", {{2, 4, 3}});
  one.forward();
  expect_close(one.out[0], one.in[0], 0.f, "group 1");
  OpHarness two("type: 'ShuffleChannel' shuffle_channel_param { group: 2 }", {{2, 4, 3}});
  two.forward();
  EXPECT_EQ(two.out[0].f32()[12 + 3], two.in[0].f32()[12 + 6]) << "item 1, output channel 1 is its input channel 2";
  expect_error_naming("type: 'ShuffleChannel' shuffle_channel_param { group: 4 }", {{1, 6, 2, 2}},
                      "not divisible by shuffle_channel_param.group 4");
  expect_error_naming("type: 'ShuffleChannel' shuffle_channel_param { group: 0 }", {{1, 6, 2, 2}},
                      "shuffle_channel_param.group must be positive");
}

TEST(Axpy, ScalesEachChannelAndAdds) {
  OpHarness h("type: 'Axpy'", {{1, 2, 1, 1}, {1, 2, 1, 2}, {1, 2, 1, 2}});
  ASSERT_EQ(h.out[0].shape(), (Shape{1, 2, 1, 2}));
  float a[] = {2, -0.5f}, x[] = {1, 3, 4, -2}, y[] = {10, 20, 30, 40};
  std::copy(a, a + 2, h.in[0].f32());
  std::copy(x, x + 4, h.in[1].f32());
  std::copy(y, y + 4, h.in[2].f32());
  h.forward();
  float want[] = {12, 26, 28, 41};  // 2 * (1, 3) + (10, 20); -0.5 * (4, -2) + (30, 40)
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h.out[0].f32()[i], want[i]) << i;
  float g[] = {1, 2, -1, 0.5f};
  std::copy(g, g + 4, h.out_grad[0].f32());
  h.backward();
  EXPECT_EQ(h.in_grad[0].f32()[0], 7.f);   // 1 * 1 + 2 * 3
  EXPECT_EQ(h.in_grad[0].f32()[1], -5.f);  // -1 * 4 + 0.5 * -2
  float dx[] = {2, 4, 0.5f, -0.25f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(h.in_grad[1].f32()[i], dx[i]) << i;
    EXPECT_EQ(h.in_grad[2].f32()[i], g[i]) << i;
  }
  h.check_gradients();
  expect_error_naming("type: 'Axpy'", {{1, 2, 2, 1}, {1, 2, 2, 2}, {1, 2, 2, 2}}, "bottom 0 (the scale)");
  expect_error_naming("type: 'Axpy'", {{1, 3}, {1, 2, 2, 2}, {1, 2, 2, 2}}, "bottom 0 (the scale)");
  expect_error_naming("type: 'Axpy'", {{1, 2}, {1, 2, 2, 2}, {1, 2, 2, 3}}, "bottom 2 has shape");
}

struct Im2colSpec {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// Column (c, i, j) at (oy, ox) reads x[c][oy sh - ph + i dh][ox sw - pw + j dw], 0 outside.
Tensor naive_im2col(const Tensor& x, const Im2colSpec& k) {
  int64_t n = x.dim(0), c = x.dim(1), H = x.dim(2), W = x.dim(3);
  int64_t oh = (H + 2 * k.ph - (k.dh * (k.kh - 1) + 1)) / k.sh + 1;
  int64_t ow = (W + 2 * k.pw - (k.dw * (k.kw - 1) + 1)) / k.sw + 1;
  Tensor y({n, c * k.kh * k.kw, oh, ow});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < k.kh; ++i)
        for (int64_t j = 0; j < k.kw; ++j)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              int64_t iy = oy * k.sh - k.ph + i * k.dh, ix = ox * k.sw - k.pw + j * k.dw;
              bool in = iy >= 0 && ix >= 0 && iy < H && ix < W;
              y.f32()[(((b * c + ch) * k.kh + i) * k.kw + j) * oh * ow + oy * ow + ox] =
                  in ? at4(x, b, ch, iy, ix) : 0.f;
            }
  return y;
}

TEST(Im2col, ColumnsOfTheConvolutionGeometry) {
  OpHarness h("type: 'Im2col' convolution_param { kernel_size: 3 stride: 2 pad: 1 }", {{2, 3, 5, 4}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 27, 3, 2}));
  h.forward();
  expect_close(h.out[0], naive_im2col(h.in[0], {3, 3, 2, 2, 1, 1, 1, 1}), 0.f, "im2col");
  h.check_gradients();
  OpHarness d("type: 'Im2col' convolution_param { kernel_h: 2 kernel_w: 3 pad_h: 0 pad_w: 2 dilation: 2 }",
              {{1, 2, 6, 5}});
  d.forward();
  expect_close(d.out[0], naive_im2col(d.in[0], {2, 3, 1, 1, 0, 2, 2, 2}), 0.f, "dilated im2col");
  d.check_gradients();
  expect_error_naming("type: 'Im2col'", {{1, 2, 6, 5}}, "convolution_param.kernel_size");
  expect_error_naming("type: 'Im2col' convolution_param { kernel_size: 3 }", {{2, 6, 5}}, "spatial axes");
  expect_error_naming("type: 'Im2col' convolution_param { kernel_size: 7 }", {{1, 2, 6, 5}}, "does not fit");
}

}  // namespace
}  // namespace bks::test
