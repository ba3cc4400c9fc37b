// Data-movement ops (Flatten, Reshape, Concat, Slice, Crop, Split, Silence), Eltwise,
// Reduction and ArgMax.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace bks::test
