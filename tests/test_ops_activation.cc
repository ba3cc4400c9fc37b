// Elementwise activations, PReLU and Dropout: forward against the formula, backward by
// finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/worse.h"
#include "op_harness.h"
#include "ops/vector_math.h"

namespace bks::test {
namespace {

struct ActCase {
  const char* name;
  std::string layer;
  std::function<double(double)> f;
  float lo, hi;  // input range (kept away from kinks and domain edges)
};

class ActivationTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(ActivationTest, ForwardMatchesFormula) {
  const auto& a = GetParam();
  OpHarness h(a.layer, {{2, 3, 4, 5}});
  h.randomize_inputs(a.lo, a.hi);
  h.forward();
  for (int64_t i = 0; i < h.in[0].numel(); ++i)
    ASSERT_NEAR(h.out[0].f32()[i], a.f(h.in[0].f32()[i]), 1e-5 * std::max(1.0, std::fabs(a.f(h.in[0].f32()[i]))))
        << a.name << " at x = " << h.in[0].f32()[i];
}

TEST_P(ActivationTest, GradientsMatchFiniteDifferences) {
  const auto& a = GetParam();
  OpHarness h(a.layer, {{2, 3, 4, 5}});
  h.randomize_inputs(a.lo, a.hi);
  // Keep inputs away from kinks at 0 (ReLU, AbsVal, ...).
  for (int64_t i = 0; i < h.in[0].numel(); ++i)
    if (std::fabs(h.in[0].f32()[i]) < 0.05f) h.in[0].f32()[i] += 0.1f;
  h.check_gradients(1e-3f, 1e-2f);
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

INSTANTIATE_TEST_SUITE_P(
    All, ActivationTest,
    ::testing::Values(ActCase{"ReLU", "type: 'ReLU'", [](double x) { return x > 0 ? x : 0; }, -2, 2},
                      ActCase{"LeakyReLU", "type: 'ReLU' relu_param { negative_slope: 0.1 }",
                              [](double x) { return x > 0 ? x : 0.1 * x; }, -2, 2},
                      ActCase{"Sigmoid", "type: 'Sigmoid'", sig, -4, 4},
                      ActCase{"TanH", "type: 'TanH'", [](double x) { return std::tanh(x); }, -3, 3},
                      ActCase{"ELU", "type: 'ELU' elu_param { alpha: 0.7 }",
                              [](double x) { return x > 0 ? x : 0.7 * (std::exp(x) - 1); }, -2, 2},
                      ActCase{"AbsVal", "type: 'AbsVal'", [](double x) { return std::fabs(x); }, -2, 2},
                      ActCase{"Power", "type: 'Power' power_param { power: 2 scale: 0.5 shift: 1.5 }",
                              [](double x) { return std::pow(1.5 + 0.5 * x, 2); }, -2, 2},
                      ActCase{"Exp", "type: 'Exp' exp_param { base: 2 scale: 0.5 shift: 0.1 }",
                              [](double x) { return std::pow(2.0, 0.1 + 0.5 * x); }, -2, 2},
                      ActCase{"ExpE", "type: 'Exp'", [](double x) { return std::exp(x); }, -2, 2},
                      ActCase{"Log", "type: 'Log' log_param { base: 10 scale: 2 shift: 5 }",
                              [](double x) { return std::log10(5 + 2 * x); }, -2, 2},
                      ActCase{"BNLL", "type: 'BNLL'", [](double x) { return std::log1p(std::exp(x)); }, -3, 3},
                      ActCase{"Clip", "type: 'Clip' clip_param { min: -0.5 max: 0.7 }",
                              [](double x) { return std::min(std::max(x, -0.5), 0.7); }, -0.45f, 0.65f},
                      ActCase{"Swish", "type: 'Swish' swish_param { beta: 1.5 }",
                              [](double x) { return x * sig(1.5 * x); }, -3, 3},
                      ActCase{"Erf", "type: 'Erf'", [](double x) { return std::erf(x); }, -2.5f, 2.5f},
                      ActCase{"GELU", "type: 'GELU'",
                              [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4, 4},
                      ActCase{"GELU_tanh", "type: 'GELU' gelu_param { approximate: TANH }",
                              [](double x) {
                                return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
                              },
                              -4, 4}),
    [](const auto& info) { return std::string(info.param.name); });

// ReLU6 saturates at 0 and 6: inputs cover both sides of each kink.
// The vectorisable exp, logistic and tanh the recurrent cells use, against the double
// functions, over the float range and past it.
TEST(VectorMath, ExpLogisticAndTanhMatchTheDoubleFunctions) {
  double worst_exp = 0, worst_logistic = 0, worst_tanh = 0;
  for (float x = -90.f; x <= 90.f; x += 0.0037f) {
    const double e = std::exp(static_cast<double>(x)), l = 1 / (1 + std::exp(-static_cast<double>(x)));
    const double t = std::tanh(static_cast<double>(x));
    if (x > -87.f && x < 88.f) worst_exp = worse(worst_exp, std::abs(exp_vec(x) - e) / e);
    worst_logistic = worse(worst_logistic, std::abs(logistic_vec(x) - l) / std::max(l, 1e-30));
    worst_tanh = worse(worst_tanh, std::abs(tanh_vec(x) - t) / std::max(std::abs(t), 1e-30));
  }
  EXPECT_LT(worst_exp, 4e-7);
  EXPECT_LT(worst_logistic, 1e-6) << "where exp is clamped, logistic is below 1e-38 anyway";
  EXPECT_LT(worst_tanh, 6e-7);
  for (float x : {1e-6f, -3e-4f, 0.2499f, 0.25f, -0.25f})
    EXPECT_NEAR(tanh_vec(x), std::tanh(static_cast<double>(x)), 2e-7 * std::abs(x)) << x;
  EXPECT_GT(exp_vec(-1000.f), 0.f);
  EXPECT_TRUE(std::isfinite(exp_vec(1000.f)));
  EXPECT_EQ(tanh_vec(100.f), 1.f);
  EXPECT_EQ(tanh_vec(-100.f), -1.f);
}

// GELU's erf: absolute error below 6e-7 everywhere (the formula's 1.5e-7 plus float
// rounding; a few units in the last place near +-1), relative below 1e-6 near zero (where
// GELU multiplies it by x anyway), exactly +-1 far out.
TEST(VectorMath, ErfMatchesTheDoubleFunction) {
  double worst_abs = 0, worst_rel_small = 0;
  for (float x = -8.f; x <= 8.f; x += 0.00071f) {
    const double e = std::erf(static_cast<double>(x));
    worst_abs = worse(worst_abs, std::abs(erf_vec(x) - e));
    if (std::abs(x) < 0.5f && x != 0.f)
      worst_rel_small = worse(worst_rel_small, std::abs(erf_vec(x) - e) / std::abs(e));
  }
  EXPECT_LT(worst_abs, 6e-7);
  EXPECT_LT(worst_rel_small, 1e-6);
  EXPECT_EQ(erf_vec(0.f), 0.f);
  EXPECT_EQ(erf_vec(30.f), 1.f);
  EXPECT_EQ(erf_vec(-30.f), -1.f);
}

TEST(ReLU6, ClampsToZeroAndSixWithGradientInside) {
  OpHarness h("type: 'ReLU6'", {{2, 3, 4, 5}});
  h.randomize_inputs(-4.f, 10.f);
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    float& x = h.in[0].f32()[i];
    if (std::fabs(x) < 0.05f || std::fabs(x - 6.f) < 0.05f) x += 0.1f;  // off the kinks for the differences
  }
  h.forward();
  int low = 0, high = 0;
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    double x = h.in[0].f32()[i];
    ASSERT_EQ(h.out[0].f32()[i], static_cast<float>(std::min(std::max(x, 0.0), 6.0))) << "x = " << x;
    low += x < 0;
    high += x > 6;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_TRUE(h.facts().allows_inplace);  // the gradient is read off y
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(PReLU, PerChannelSlopesAndGradients) {
  OpHarness h("type: 'PReLU'", {{2, 3, 2, 2}});
  ASSERT_EQ(h.params[0].shape(), (Shape{3}));
  for (int64_t i = 0; i < h.in[0].numel(); ++i)
    if (std::fabs(h.in[0].f32()[i]) < 0.05f) h.in[0].f32()[i] += 0.1f;
  h.forward();
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    float x = h.in[0].f32()[i], a = h.params[0].f32()[(i / 4) % 3];
    EXPECT_FLOAT_EQ(h.out[0].f32()[i], x > 0 ? x : a * x);
  }
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(PReLU, SharedSlope) {
  OpHarness h("type: 'PReLU' prelu_param { channel_shared: true }", {{2, 3, 2}});
  ASSERT_EQ(h.params[0].shape(), (Shape{1}));
  for (int64_t i = 0; i < h.in[0].numel(); ++i)
    if (std::fabs(h.in[0].f32()[i]) < 0.05f) h.in[0].f32()[i] += 0.1f;
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(Dropout, TrainDropsAndScalesTestPassesThrough) {
  OpHarness h("name: 'drop' type: 'Dropout' dropout_param { dropout_ratio: 0.3 }", {{100, 100}});
  h.in[0].fill(1.f);
  h.forward();
  int64_t kept = 0;
  for (int64_t i = 0; i < h.out[0].numel(); ++i) {
    float v = h.out[0].f32()[i];
    ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.7f) < 1e-6f);
    kept += v != 0.f;
  }
  EXPECT_NEAR(kept / 10000.0, 0.7, 0.02);
  h.check_gradients(1e-3f, 1e-2f);
  OpHarness t("type: 'Dropout' dropout_param { dropout_ratio: 0.3 }", {{4, 5}}, proto::TEST);
  t.forward();
  expect_close(t.out[0], t.in[0], 0.f, "TEST dropout is identity");
}

}  // namespace
}  // namespace bks::test
