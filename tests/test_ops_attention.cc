// MultiHeadAttention (exact softmax and Performer's random features) and PositionalEncoding.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attention_oracle.h"
#include "op_harness.h"

namespace bks::test {
namespace {

std::string attention_layer(const std::string& fields) {
  return "type: 'MultiHeadAttention' attention_param { " + fields + " }";
}

// ||a - b|| / ||b||.
double relative_error(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    d += (static_cast<double>(a.f32()[i]) - b.f32()[i]) * (static_cast<double>(a.f32()[i]) - b.f32()[i]);
    n += static_cast<double>(b.f32()[i]) * b.f32()[i];
  }
  return std::sqrt(d / n);
}

// Five timesteps of three streams, 8 wide, 2 heads: every (stream, head) attends over its own
// timesteps (all, or with `causal` those up to its own), on both kernels; then the gradients
// of x and of every learned blob by finite differences.
TEST(MultiHeadAttention, SoftmaxMatchesTheOracleAndItsGradients) {
  for (bool causal : {false, true})
    for (const char* kernel : {"loops", "oneDNN"}) {
      SCOPED_TRACE(fmt::format("causal {}, kernel {}", causal, kernel));
      OpHarness h(attention_layer(fmt::format("num_heads: 2 causal: {}", causal)), {{5, 3, 8}}, proto::TRAIN, 1, {},
                  kernel);
      ASSERT_EQ(h.params.size(), 4u);
      EXPECT_EQ(h.params[0].shape(), (Shape{24, 8}));
      EXPECT_EQ(h.params[2].shape(), (Shape{8, 8}));
      h.randomize_inputs(-2, 2);
      h.forward();
      const Tensor want = attention_oracle({.heads = 2, .causal = causal}, h.in[0], h.params);
      expect_close(h.out[0], want, 1e-5f, "output");
      h.check_gradients(1e-3f, 1e-2f);
    }
}

// Causal attention at t reads nothing after t: changing the last timestep leaves the others.
TEST(MultiHeadAttention, CausalIgnoresTheFuture) {
  for (const char* kind : {"SOFTMAX", "PERFORMER"}) {
    OpHarness h(attention_layer(fmt::format("num_heads: 2 causal: true kernel: {}", kind)), {{4, 2, 6}});
    h.randomize_inputs();
    h.forward();
    const Tensor before = h.out[0].clone();
    for (int64_t i = 3 * 2 * 6; i < h.in[0].numel(); ++i) h.in[0].f32()[i] += 1.5f;
    h.forward();
    for (int64_t i = 0; i < 3 * 2 * 6; ++i) EXPECT_EQ(h.out[0].f32()[i], before.f32()[i]) << kind << " element " << i;
    bool last_changed = false;
    for (int64_t i = 3 * 2 * 6; i < h.out[0].numel(); ++i) last_changed |= h.out[0].f32()[i] != before.f32()[i];
    EXPECT_TRUE(last_changed) << kind;
  }
}

// PERFORMER computes the random-feature estimate with the features it drew at its first
// forward (the blob starts at zero), exactly as the oracle writes it; gradients of x and of
// the learned blobs (not of the features, which are not learned).
TEST(MultiHeadAttention, PerformerMatchesItsEstimateAndItsGradients) {
  for (bool causal : {false, true})
    for (const char* kernel : {"loops", "oneDNN"}) {
      SCOPED_TRACE(fmt::format("causal {}, kernel {}", causal, kernel));
      OpHarness h(attention_layer(fmt::format("num_heads: 2 head_dim: 3 num_output: 5 causal: {} kernel: PERFORMER "
                                              "num_features: 16",
                                              causal)),
                  {{6, 2, 4}}, proto::TRAIN, 1, {}, kernel);
      ASSERT_EQ(h.params.size(), 5u);
      EXPECT_EQ(h.params[4].shape(), (Shape{16, 3}));
      EXPECT_EQ(h.out[0].shape(), (Shape{6, 2, 5}));
      h.randomize_inputs(-1, 1);
      h.params[4].zero();  // as a new net's blob: drawn at the first forward
      h.forward();
      double norm = 0;
      for (int64_t i = 0; i < h.params[4].numel(); ++i) norm += h.params[4].f32()[i] * h.params[4].f32()[i];
      EXPECT_GT(norm, 16.0) << "features drawn (rows of length about sqrt(3))";
      const Tensor want = attention_oracle({.heads = 2, .head_dim = 3, .out = 5, .causal = causal, .performer = true},
                                           h.in[0], h.params);
      expect_close(h.out[0], want, 1e-5f, "output");
      h.check_gradients(1e-3f, 1e-2f);
    }
}

// Causal PERFORMER runs in chunks of 64 timesteps: 150 of them make two whole chunks and a
// part, whose running sums must carry across, forwards and in backward.
TEST(MultiHeadAttention, PerformerCausalCarriesAcrossChunks) {
  for (const char* kernel : {"loops", "oneDNN"}) {
    SCOPED_TRACE(kernel);
    OpHarness h(attention_layer("num_heads: 2 causal: true kernel: PERFORMER num_features: 6"), {{150, 1, 4}},
                proto::TRAIN, 1, {}, kernel);
    h.randomize_inputs(-1, 1);
    h.forward();
    const Tensor want = attention_oracle({.heads = 2, .causal = true, .performer = true}, h.in[0], h.params);
    expect_close(h.out[0], want, 1e-5f, "output");
    h.check_gradients(1e-3f, 1e-2f);
  }
}

// The rows of one block of features are orthogonal, and each has the length of a Gaussian
// vector (about sqrt(head_dim)), not 1.
TEST(MultiHeadAttention, PerformerFeaturesAreOrthogonalBlocks) {
  OpHarness h(attention_layer("num_heads: 1 kernel: PERFORMER num_features: 20"), {{2, 1, 8}});
  h.params.back().zero();
  h.forward();
  const Tensor& w = h.params.back();
  ASSERT_EQ(w.shape(), (Shape{20, 8}));
  auto dot = [&](int64_t a, int64_t b) {
    double s = 0;
    for (int64_t e = 0; e < 8; ++e) s += static_cast<double>(w.f32()[a * 8 + e]) * w.f32()[b * 8 + e];
    return s;
  };
  for (int64_t block = 0; block < 20; block += 8)
    for (int64_t a = block; a < std::min<int64_t>(block + 8, 20); ++a) {
      EXPECT_GT(dot(a, a), 0.5) << "row " << a;
      EXPECT_LT(dot(a, a), 40.0) << "row " << a;
      for (int64_t b = block; b < a; ++b) EXPECT_NEAR(dot(a, b), 0.0, 1e-4) << "rows " << a << ", " << b;
    }
  EXPECT_GT(std::fabs(dot(0, 8)), 1e-3) << "different blocks are drawn independently";
}

// The estimate converges to exact attention as the features grow (same projections). Its
// variance grows as exp(|q~|^2 + |k~|^2): projections of xavier's scale keep |q~|^2 about
// 0.3, as in a freshly initialised net.
TEST(MultiHeadAttention, PerformerApproachesExactAttentionWithMoreFeatures) {
  for (bool causal : {false, true}) {
    const std::string common = fmt::format("num_heads: 2 causal: {}", causal);
    OpHarness exact(attention_layer(common), {{16, 2, 16}});
    exact.randomize_inputs(-1, 1);
    for (int64_t i = 0; i < exact.params[0].numel(); ++i) exact.params[0].f32()[i] *= 0.3f;
    exact.forward();
    double previous = 1e9;
    for (int m : {8, 128, 4096}) {
      OpHarness perf(attention_layer(common + fmt::format(" kernel: PERFORMER num_features: {}", m)), {{16, 2, 16}});
      for (int p = 0; p < 4; ++p) perf.params[static_cast<size_t>(p)].copy_from(exact.params[static_cast<size_t>(p)]);
      perf.in[0].copy_from(exact.in[0]);
      perf.params[4].zero();
      perf.forward();
      const double err = relative_error(perf.out[0], exact.out[0]);
      EXPECT_LT(err, previous * 0.6) << "causal " << causal << ", " << m << " features";
      previous = err;
    }
    EXPECT_LT(previous, 0.05) << "causal " << causal << ", 4096 features";
  }
}

// New features at every multiple of redraw_interval in training, as a function of the step
// alone (a run resumed at step 4 draws what an uninterrupted one did); never in TEST.
TEST(MultiHeadAttention, PerformerRedrawsItsFeaturesOnSchedule) {
  const std::string layer = attention_layer("num_heads: 1 kernel: PERFORMER num_features: 8 redraw_interval: 2");
  OpHarness h(layer, {{3, 1, 4}});
  h.randomize_inputs();
  h.params.back().zero();
  std::vector<Tensor> seen;
  for (int64_t step = 0; step < 5; ++step) {
    h.set_step(step);
    h.forward();
    seen.push_back(h.params.back().clone());
  }
  auto same = [](const Tensor& a, const Tensor& b) {
    return std::equal(a.f32(), a.f32() + a.numel(), b.f32(), b.f32() + b.numel());
  };
  EXPECT_TRUE(same(seen[0], seen[1]));
  EXPECT_FALSE(same(seen[1], seen[2]));
  EXPECT_TRUE(same(seen[2], seen[3]));
  EXPECT_FALSE(same(seen[3], seen[4]));
  OpHarness resumed(layer, {{3, 1, 4}});
  resumed.params.back().zero();
  resumed.set_step(4);
  resumed.forward();
  EXPECT_TRUE(same(resumed.params.back(), seen[4]));
  OpHarness test(layer, {{3, 1, 4}}, proto::TEST);
  test.params.back().zero();
  test.forward();
  const Tensor drawn = test.params.back().clone();
  test.set_step(2);
  test.forward();
  EXPECT_TRUE(same(test.params.back(), drawn)) << "TEST never redraws";
}

// Training drops attention weights (a mask that is a function of the step, so forward and
// backward agree and the gradients check); TEST computes exact attention.
TEST(MultiHeadAttention, DropoutDropsWeightsInTrainingOnly) {
  const std::string layer = attention_layer("num_heads: 2 dropout: 0.4");
  OpHarness train(layer, {{6, 2, 4}});
  OpHarness test(layer, {{6, 2, 4}}, proto::TEST);
  train.randomize_inputs();
  test.in[0].copy_from(train.in[0]);
  for (size_t p = 0; p < train.params.size(); ++p) test.params[p].copy_from(train.params[p]);
  test.forward();
  expect_close(test.out[0], attention_oracle({.heads = 2}, test.in[0], test.params), 1e-5f, "TEST output");
  train.forward();
  EXPECT_GT(relative_error(train.out[0], test.out[0]), 0.05);
  train.check_gradients(1e-3f, 1e-2f);
}

TEST(MultiHeadAttention, BadFieldsAreClearErrors) {
  auto error_of = [](const std::string& fields, Shape in) {
    return input_error_of([&] { OpHarness h(attention_layer(fields), {in}); });
  };
  EXPECT_NE(
      error_of("num_heads: 3", {2, 1, 8}).find("attention_param.num_heads 3 does not divide the bottom's width 8"),
      std::string::npos);
  EXPECT_NE(error_of("num_heads: 2", {2, 8}).find("bottom must be (timesteps, streams, width)"), std::string::npos);
  EXPECT_NE(error_of("num_heads: 0", {2, 1, 8}).find("attention_param.num_heads must be positive"), std::string::npos);
  EXPECT_NE(error_of("num_heads: 2 kernel: PERFORMER dropout: 0.1", {2, 1, 8}).find("attention_param.dropout"),
            std::string::npos);
  EXPECT_NE(error_of("num_heads: 2 dropout: 1", {2, 1, 8}).find("attention_param.dropout must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of("num_heads: 2 kernel: PERFORMER num_features: 0", {2, 1, 8}).find("num_features must be positive"),
            std::string::npos);
}

// LEARNED adds row t of its blob to every vector at position t (axis 0 here: (T, N, D)).
TEST(PositionalEncoding, LearnedAddsThePositionsRow) {
  OpHarness h("type: 'PositionalEncoding' positional_encoding_param { max_length: 6 }", {{4, 3, 5}});
  ASSERT_EQ(h.params.size(), 1u);
  EXPECT_EQ(h.params[0].shape(), (Shape{6, 5}));
  h.randomize_inputs();
  h.forward();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t d = 0; d < 5; ++d) {
        const int64_t i = (t * 3 + n) * 5 + d;
        EXPECT_FLOAT_EQ(h.out[0].f32()[i], h.in[0].f32()[i] + h.params[0].f32()[t * 5 + d]);
      }
  h.check_gradients(1e-3f, 1e-2f);
}

// SINUSOIDAL over axis 1 of (N, T, D): sin and cos of t / 10000^(2i / D), no blob.
TEST(PositionalEncoding, SinusoidalAddsFixedWaves) {
  OpHarness h("type: 'PositionalEncoding' positional_encoding_param { kind: SINUSOIDAL axis: 1 }", {{2, 7, 6}});
  EXPECT_TRUE(h.params.empty());
  h.randomize_inputs();
  h.forward();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t i = 0; i < 6; ++i) {
        const double angle = static_cast<double>(t) / std::pow(10000.0, static_cast<double>(i - i % 2) / 6.0);
        const int64_t k = (n * 7 + t) * 6 + i;
        EXPECT_NEAR(h.out[0].f32()[k] - h.in[0].f32()[k], i % 2 == 0 ? std::sin(angle) : std::cos(angle), 1e-6);
      }
  h.check_gradients(1e-3f, 1e-2f);
}

TEST(PositionalEncoding, BadFieldsAreClearErrors) {
  auto error_of = [](const std::string& fields, Shape in) {
    return input_error_of(
        [&] { OpHarness h("type: 'PositionalEncoding' positional_encoding_param { " + fields + " }", {in}); });
  };
  EXPECT_NE(error_of("max_length: 4", {5, 2, 3}).find("max_length 4 is below the bottom's 5 positions"),
            std::string::npos);
  EXPECT_NE(error_of("max_length: 9 axis: 2", {5, 2, 3}).find("positional_encoding_param.axis 2 must name an axis"),
            std::string::npos);
  EXPECT_NE(error_of("max_length: 9 axis: -1", {5, 2, 3}).find("positional_encoding_param.axis -1"), std::string::npos);
}

}  // namespace
}  // namespace bks::test
