// InnerProduct (both weight layouts, any axis) and Embed.
#include <gtest/gtest.h>

#include "op_harness.h"

namespace bks::test {
namespace {

TEST(InnerProduct, ForwardMatchesMatrixProduct) {
  OpHarness h("type: 'InnerProduct' inner_product_param { num_output: 5 }", {{3, 2, 2, 2}});
  h.forward();
  ASSERT_EQ(h.out[0].shape(), (Shape{3, 5}));
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 5; ++o) {
      double s = h.params[1].f32()[o];
      for (int k = 0; k < 8; ++k) s += h.in[0].f32()[i * 8 + k] * h.params[0].f32()[o * 8 + k];
      EXPECT_NEAR(h.out[0].f32()[i * 5 + o], s, 1e-5);
    }
}

TEST(InnerProduct, TransposedWeights) {
  OpHarness h("type: 'InnerProduct' inner_product_param { num_output: 4 transpose: true }", {{2, 3}});
  ASSERT_EQ(h.params[0].shape(), (Shape{3, 4}));
  h.forward();
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 4; ++o) {
      double s = h.params[1].f32()[o];
      for (int k = 0; k < 3; ++k) s += h.in[0].f32()[i * 3 + k] * h.params[0].f32()[k * 4 + o];
      EXPECT_NEAR(h.out[0].f32()[i * 4 + o], s, 1e-5);
    }
  h.check_gradients(1e-2f, 1e-2f);
}

TEST(InnerProduct, GradientsOverAxis2) {
  OpHarness h("type: 'InnerProduct' inner_product_param { num_output: 3 axis: 2 }", {{2, 3, 4}});
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 3, 3}));
  h.check_gradients(1e-2f, 1e-2f);
}

TEST(InnerProduct, NoBias) {
  OpHarness h("type: 'InnerProduct' inner_product_param { num_output: 3 bias_term: false }", {{4, 5}});
  EXPECT_EQ(h.params.size(), 1u);
  h.check_gradients(1e-2f, 1e-2f);
}

TEST(Embed, LooksUpRowsAndAccumulatesGradients) {
  OpHarness h("type: 'Embed' embed_param { num_output: 3 input_dim: 5 }", {{4}});
  float idx[] = {0, 4, 2, 4};
  std::copy(idx, idx + 4, h.in[0].f32());
  h.forward();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_FLOAT_EQ(h.out[0].f32()[i * 3 + j],
                      h.params[0].f32()[static_cast<int>(idx[i]) * 3 + j] + h.params[1].f32()[j]);
  h.check_gradients(1e-2f, 1e-2f, {-1});
}

TEST(Embed, RejectsOutOfRangeIndex) {
  OpHarness h("type: 'Embed' embed_param { num_output: 3 input_dim: 5 }", {{1}});
  h.in[0].f32()[0] = 5;
  EXPECT_THROW(h.forward(), RuntimeError);
}

}  // namespace
}  // namespace bks::test
