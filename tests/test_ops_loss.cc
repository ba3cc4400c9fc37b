// Softmax, SoftmaxWithLoss (normalisation, ignore_label), Accuracy (top-k), EuclideanLoss
// and SigmoidCrossEntropyLoss.
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

namespace bks::test {
namespace {

void set_labels(Tensor& t, std::initializer_list<float> v) { std::copy(v.begin(), v.end(), t.f32()); }

TEST(Softmax, RowsSumToOneAndGradient) {
  OpHarness h("type: 'Softmax'", {{3, 4, 2}});
  h.forward();
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 2; ++i) {
      double s = 0;
      for (int c = 0; c < 4; ++c) s += h.out[0].f32()[(n * 4 + c) * 2 + i];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  h.check_gradients();
}

TEST(SoftmaxWithLoss, ValueMatchesCrossEntropy) {
  OpHarness h("type: 'SoftmaxWithLoss'", {{3, 4}, {3}});
  set_labels(h.in[1], {0, 3, 1});
  h.forward();
  double loss = 0;
  int labels[] = {0, 3, 1};
  for (int n = 0; n < 3; ++n) {
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(h.in[0].f32()[n * 4 + c]);
    loss -= std::log(std::exp(h.in[0].f32()[n * 4 + labels[n]]) / z);
  }
  EXPECT_NEAR(h.out[0].f32()[0], loss / 3, 1e-5);
  h.out_grad[0].f32()[0] = 1.f;
  h.check_gradients(1e-3f, 1e-2f, {0});
}

TEST(SoftmaxWithLoss, IgnoreLabelAndNormalization) {
  OpHarness valid("type: 'SoftmaxWithLoss' loss_param { ignore_label: 2 }", {{4, 3}, {4}});
  set_labels(valid.in[1], {0, 2, 1, 2});
  valid.forward();
  OpHarness none("type: 'SoftmaxWithLoss' loss_param { ignore_label: 2 normalization: NONE }", {{4, 3}, {4}});
  none.in[0].copy_from(valid.in[0]);
  set_labels(none.in[1], {0, 2, 1, 2});
  none.forward();
  EXPECT_NEAR(none.out[0].f32()[0], valid.out[0].f32()[0] * 2, 1e-5);  // 2 valid items
  valid.check_gradients(1e-3f, 1e-2f, {0});
  EXPECT_EQ(valid.in_grad[0].f32()[3], 0.f) << "ignored items get no gradient";
}

TEST(SoftmaxWithLoss, SpatialAxisAndBadLabel) {
  OpHarness h("type: 'SoftmaxWithLoss'", {{2, 3, 2, 2}, {2, 1, 2, 2}});
  set_labels(h.in[1], {0, 1, 2, 0, 2, 2, 1, 0});
  h.check_gradients(1e-3f, 1e-2f, {0});
  set_labels(h.in[1], {0, 1, 7, 0, 2, 2, 1, 0});
  EXPECT_THROW(h.forward(), RuntimeError);
  EXPECT_THROW(OpHarness("type: 'SoftmaxWithLoss'", {{2, 3}, {3}}), InputError);
}

TEST(Accuracy, TopOneTopKAndPerClass) {
  OpHarness h("type: 'Accuracy'", {{4, 3}, {4}}, proto::TEST, 2);
  float x[] = {0.9f, 0.1f, 0.0f, 0.2f, 0.3f, 0.5f, 0.4f, 0.4f, 0.2f, 0.1f, 0.8f, 0.1f};
  std::copy(x, x + 12, h.in[0].f32());
  set_labels(h.in[1], {0, 1, 0, 1});
  h.forward();
  // item0 correct; item1 wrong (2 wins); item2 tie with class 1 counts against; item3 correct.
  EXPECT_FLOAT_EQ(h.out[0].f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(h.out[1].f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(h.out[1].f32()[1], 0.5f);
  OpHarness k("type: 'Accuracy' accuracy_param { top_k: 2 }", {{4, 3}, {4}}, proto::TEST);
  std::copy(x, x + 12, k.in[0].f32());
  set_labels(k.in[1], {0, 1, 0, 1});
  k.forward();
  EXPECT_FLOAT_EQ(k.out[0].f32()[0], 1.0f);
}

TEST(EuclideanLoss, ValueAndBothGradients) {
  OpHarness h("type: 'EuclideanLoss'", {{3, 4}, {3, 4}});
  h.forward();
  double s = 0;
  for (int i = 0; i < 12; ++i) s += std::pow(h.in[0].f32()[i] - h.in[1].f32()[i], 2);
  EXPECT_NEAR(h.out[0].f32()[0], s / 6, 1e-5);
  h.check_gradients();
}

TEST(SigmoidCrossEntropyLoss, ValueAndGradient) {
  OpHarness h("type: 'SigmoidCrossEntropyLoss'", {{2, 3}, {2, 3}});
  set_labels(h.in[1], {1, 0, 1, 0, 0, 1});
  h.forward();
  double s = 0;
  for (int i = 0; i < 6; ++i) {
    double p = 1 / (1 + std::exp(-h.in[0].f32()[i])), t = h.in[1].f32()[i];
    s -= t * std::log(p) + (1 - t) * std::log(1 - p);
  }
  EXPECT_NEAR(h.out[0].f32()[0], s / 2, 1e-5);
  h.check_gradients(1e-3f, 1e-2f, {0});
}

}  // namespace
}  // namespace bks::test
