// BatchNorm, Scale, Bias, LRN and LayerNorm.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

namespace bks::test {
namespace {

// Each item (the axes from `axis` on) normalised by its own mean and biased variance, then
// the blobs' elementwise scale and shift; over the last axis and over the last two.
TEST(LayerNorm, NormalisesEachItemThenScalesAndShifts) {
  for (int axis : {-1, 1}) {
    OpHarness h(fmt::format("type: 'LayerNorm' layer_norm_param {{ axis: {} eps: 0.01 }}", axis), {{2, 3, 5}});
    const int64_t dim = axis == -1 ? 5 : 15, rows = 30 / dim;
    ASSERT_EQ(h.params.size(), 2u);
    ASSERT_EQ(h.params[0].shape(), axis == -1 ? Shape{5} : (Shape{3, 5}));
    h.randomize_inputs(-2, 5);
    for (int64_t i = 0; i < dim; ++i) {
      h.params[0].f32()[i] = 0.5f + 0.1f * static_cast<float>(i);
      h.params[1].f32()[i] = 0.2f * static_cast<float>(i) - 0.3f;
    }
    h.forward();
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = h.in[0].f32() + r * dim;
      double m = 0, v = 0;
      for (int64_t i = 0; i < dim; ++i) m += x[i] / static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) v += (x[i] - m) * (x[i] - m) / static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i)
        EXPECT_NEAR(h.out[0].f32()[r * dim + i],
                    (x[i] - m) / std::sqrt(v + 0.01) * h.params[0].f32()[i] + h.params[1].f32()[i], 1e-5)
            << "axis " << axis << ", item " << r << ", element " << i;
    }
    h.check_gradients(1e-3f, 1e-2f);
  }
}

TEST(LayerNorm, WithoutBiasAndBadFields) {
  OpHarness h("type: 'LayerNorm' layer_norm_param { bias_term: false }", {{4, 6}});
  EXPECT_EQ(h.params.size(), 1u);
  h.check_gradients(1e-3f, 1e-2f);
  auto error_of = [](const std::string& layer) {
    try {
      OpHarness bad(layer, {{4, 6}});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("type: 'LayerNorm' layer_norm_param { axis: 2 }").find(
                "layer_norm_param.axis 2 is outside a 2-d bottom"),
            std::string::npos);
  EXPECT_NE(error_of("type: 'LayerNorm' layer_norm_param { eps: -1 }").find(
                "layer_norm_param.eps must be non-negative"),
            std::string::npos);
}

TEST(BatchNorm, TrainNormalisesPerChannelAndTracksStatistics) {
  OpHarness h("type: 'BatchNorm' batch_norm_param { moving_average_fraction: 0.9 }", {{4, 3, 2, 3}});
  h.randomize_inputs(-2, 5);
  std::vector<float> old_mean(h.params[0].f32(), h.params[0].f32() + 3),
      old_var(h.params[1].f32(), h.params[1].f32() + 3);
  const float old_norm = h.params[2].f32()[0];
  h.forward();
  EXPECT_NEAR(h.params[2].f32()[0], old_norm * 0.9f + 1.f, 1e-6) << "the normaliser";
  for (int c = 0; c < 3; ++c) {
    double s = 0, sq = 0, xs = 0, xsq = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 6; ++i) {
        double y = h.out[0].f32()[(n * 3 + c) * 6 + i], x = h.in[0].f32()[(n * 3 + c) * 6 + i];
        s += y;
        sq += y * y;
        xs += x;
        xsq += x * x;
      }
    EXPECT_NEAR(s / 24, 0.0, 1e-5);
    EXPECT_NEAR(sq / 24, 1.0, 1e-3);
    // Caffe's running sums: batch statistic + 0.9 x the old sum, the variance with Bessel's
    // correction m / (m - 1) for m = 24 values per channel.
    double mean = xs / 24, var = xsq / 24 - mean * mean;
    EXPECT_NEAR(h.params[0].f32()[c], mean + 0.9 * old_mean[c], 1e-4) << "channel " << c;
    EXPECT_NEAR(h.params[1].f32()[c], var * 24 / 23 + 0.9 * old_var[c], 1e-3) << "channel " << c;
  }
  EXPECT_EQ(h.param_grad[0].defined(), false) << "statistics are not learned by the solver";
}

TEST(BatchNorm, GlobalStatsUseStoredMoments) {
  OpHarness h("type: 'BatchNorm' batch_norm_param { use_global_stats: true eps: 0.001 }", {{2, 2, 3}});
  float mean[] = {1.f, -2.f}, var[] = {4.f, 0.25f};
  for (int c = 0; c < 2; ++c) {
    h.params[0].f32()[c] = mean[c] * 2;  // stored as sums with normaliser 2
    h.params[1].f32()[c] = var[c] * 2;
  }
  h.params[2].f32()[0] = 2;
  h.forward();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 3; ++i) {
        int64_t k = (n * 2 + c) * 3 + i;
        EXPECT_NEAR(h.out[0].f32()[k], (h.in[0].f32()[k] - mean[c]) / std::sqrt(var[c] + 0.001f), 1e-5);
      }
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  OpHarness h("type: 'BatchNorm'", {{3, 2, 2, 2}});
  h.check_gradients(1e-3f, 2e-2f);
}

// The SegNet/ENet forks' BN in LEARN mode: the batch's mean and biased variance per
// channel over (N, H, W), eps 1e-9, then the blobs' scale and shift; in either phase.
TEST(BN, LearnNormalisesWithBatchStatisticsThenScalesAndShifts) {
  for (Phase phase : {proto::TRAIN, proto::TEST}) {
    OpHarness h("type: 'BN' bn_param { scale_filler { type: 'constant' value: 1 } shift_filler { type: 'constant' "
                "value: 0.001 } }",
                {{3, 2, 3, 2}}, phase);
    ASSERT_EQ(h.params.size(), 2u);
    EXPECT_EQ(h.params[0].shape(), (Shape{1, 2, 1, 1})) << "the forks' blob shape";
    h.randomize_inputs(-2, 5);
    h.params[0].f32()[0] = 1.5f;
    h.params[0].f32()[1] = -0.5f;
    h.params[1].f32()[0] = 0.25f;
    h.forward();
    for (int c = 0; c < 2; ++c) {
      double s = 0, sq = 0;
      for (int n = 0; n < 3; ++n)
        for (int i = 0; i < 6; ++i) s += h.in[0].f32()[(n * 2 + c) * 6 + i];
      double mean = s / 18;
      for (int n = 0; n < 3; ++n)
        for (int i = 0; i < 6; ++i) sq += std::pow(h.in[0].f32()[(n * 2 + c) * 6 + i] - mean, 2);
      double inv_std = 1 / std::sqrt(sq / 18 + 1e-9);
      for (int n = 0; n < 3; ++n)
        for (int i = 0; i < 6; ++i) {
          int k = (n * 2 + c) * 6 + i;
          double want = h.params[0].f32()[c] * (h.in[0].f32()[k] - mean) * inv_std + h.params[1].f32()[c];
          ASSERT_NEAR(h.out[0].f32()[k], want, 1e-5) << "channel " << c << " phase " << phase;
        }
    }
  }
}

TEST(BN, InferenceIsScaleAndShift) {
  OpHarness h("type: 'BN' bn_param { bn_mode: INFERENCE scale_filler { type: 'gaussian' } shift_filler { type: "
              "'gaussian' } }",
              {{2, 3, 2, 2}});
  h.forward();
  for (int64_t i = 0; i < h.out[0].numel(); ++i) {
    int64_t c = (i / 4) % 3;
    ASSERT_NEAR(h.out[0].f32()[i], static_cast<double>(h.params[0].f32()[c]) * h.in[0].f32()[i] + h.params[1].f32()[c],
                1e-6);
  }
  EXPECT_FALSE(h.facts().allows_inplace) << "backward reads x for the scale's gradient";
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(BN, LearnGradientsMatchFiniteDifferences) {
  OpHarness h("type: 'BN' bn_param { scale_filler { type: 'uniform' min: 0.5 max: 2 } shift_filler { type: 'uniform' "
              "} }",
              {{2, 3, 3, 2}});
  EXPECT_TRUE(h.facts().allows_inplace) << "LEARN keeps its normalised values";
  h.check_gradients(1e-3f, 2e-2f);
}

TEST(BN, NeedsFourAxes) {
  try {
    OpHarness h("type: 'BN'", {{4, 3}});
    FAIL() << "a 2-axis bottom accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bottom must be 4-d"), std::string::npos) << e.what();
  }
}

TEST(Scale, LearnedFactorAndBias) {
  OpHarness h("type: 'Scale' scale_param { bias_term: true }", {{2, 3, 2, 2}});
  ASSERT_EQ(h.params[0].shape(), (Shape{3}));
  h.forward();
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    int c = static_cast<int>((i / 4) % 3);
    EXPECT_NEAR(h.out[0].f32()[i], h.in[0].f32()[i] * h.params[0].f32()[c] + h.params[1].f32()[c], 1e-6);
  }
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(Scale, SecondBottomAndNumAxes) {
  OpHarness h("type: 'Scale' scale_param { axis: 1 }", {{2, 3, 4}, {3, 4}});
  h.check_gradients(1e-3f, 1e-2f);
  OpHarness g("type: 'Scale' scale_param { axis: 0 num_axes: -1 }", {{2, 3}});
  ASSERT_EQ(g.params[0].shape(), (Shape{2, 3}));
  g.check_gradients(1e-3f, 1e-2f);
}

TEST(Bias, LearnedAndFromBottom) {
  OpHarness h("type: 'Bias'", {{2, 3, 2}});
  h.forward();
  for (int64_t i = 0; i < h.in[0].numel(); ++i)
    EXPECT_NEAR(h.out[0].f32()[i], h.in[0].f32()[i] + h.params[0].f32()[(i / 2) % 3], 1e-6);
  h.check_gradients(1e-3f, 1e-2f);
  OpHarness b("type: 'Bias'", {{2, 3, 2}, {3}});
  b.check_gradients(1e-3f, 1e-2f);
}

double lrn_ref(const Tensor& x, int n, int c, int i, int j, int size, double alpha, double beta, double k,
               bool across) {
  double s = 0;
  int half = size / 2;
  if (across) {
    for (int cc = c - half; cc <= c + half; ++cc)
      if (cc >= 0 && cc < x.dim(1)) s += std::pow(at4(x, n, cc, i, j), 2);
    return at4(x, n, c, i, j) * std::pow(k + alpha / size * s, -beta);
  }
  for (int a = i - half; a <= i + half; ++a)
    for (int b = j - half; b <= j + half; ++b)
      if (a >= 0 && b >= 0 && a < x.dim(2) && b < x.dim(3)) s += std::pow(at4(x, n, c, a, b), 2);
  return at4(x, n, c, i, j) * std::pow(1.0 + alpha / (size * size) * s, -beta);
}

TEST(LRN, AcrossAndWithinChannelsMatchCaffeFormula) {
  for (bool across : {true, false}) {
    OpHarness h(fmt::format("type: 'LRN' lrn_param {{ local_size: 3 alpha: 0.5 beta: 0.75 k: 2 norm_region: {} }}",
                            across ? "ACROSS_CHANNELS" : "WITHIN_CHANNEL"),
                {{2, 5, 4, 3}});
    h.forward();
    for (int n = 0; n < 2; ++n)
      for (int c = 0; c < 5; ++c)
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 3; ++j)
            ASSERT_NEAR(at4(h.out[0], n, c, i, j), lrn_ref(h.in[0], n, c, i, j, 3, 0.5, 0.75, 2, across), 1e-4)
                << (across ? "across" : "within");
    h.check_gradients(1e-3f, 2e-2f);
  }
}

}  // namespace
}  // namespace bks::test
