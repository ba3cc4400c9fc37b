// InnerProduct (both weight layouts, any axis), BatchMatMul, Embed, the recurrent layers'
// carried state and errors, and the XNOR kernels' bit arithmetic.
#include <gtest/gtest.h>

#include <string>

#include "core/rng.h"
#include "op_harness.h"
#include "ops/sparse_inner_product.h"
#include "ops/xnor_kernels.h"

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

// C = A B per batch index, the batch axes broadcast as NumPy's matmul: each product read
// here from the coordinates (a size-1 or missing axis reads index 0).
// The sparse kernel computes x W^T + b, then the fused (leaky) ReLU, as the dense product
// does, for weights stored either way round and any number of items.
TEST(SparseInnerProduct, EqualsTheDenseProduct) {
  Rng rng(3);
  const int64_t n = 37, k = 53;
  std::vector<float> w(n * k), x(9 * k), bias(n);
  for (float& v : w) v = rng.uniform(0.f, 1.f) < 0.85f ? 0.f : rng.gaussian(0.f, 1.f);
  for (int64_t i = 0; i < k; ++i) w[5 * k + i] = 0.f;  // an empty row
  for (float& v : x) v = rng.gaussian(0.f, 1.f);
  for (float& v : bias) v = rng.gaussian(0.f, 1.f);
  std::vector<float> w_kn(k * n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) w_kn[i * n + j] = w[j * k + i];
  for (bool kn : {false, true})
    for (int64_t m : {1, 9})
      for (bool relu : {false, true})
        for (bool with_bias : {false, true}) {
          SparseInnerProduct sp(kn ? w_kn.data() : w.data(), n, k, kn);
          EXPECT_NEAR(sp.density(), nonzero_fraction(w.data(), n * k), 1e-12);
          std::vector<float> y(m * n, -1.f);
          sp.run(x.data(), m, with_bias ? bias.data() : nullptr, y.data(), relu, 0.1f);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = with_bias ? bias[j] : 0.0;
              for (int64_t c = 0; c < k; ++c) s += double{w[j * k + c]} * x[i * k + c];
              if (relu && s < 0) s *= 0.1;
              ASSERT_NEAR(y[i * n + j], s, 1e-5) << kn << m << relu << with_bias << " " << i << "," << j;
            }
        }
  EXPECT_NEAR(nonzero_fraction(w.data(), n * k), 0.15, 0.03);
}

TEST(BatchMatMul, ProductsPerBatchIndexWithBroadcasting) {
  struct Case {
    Shape a, b, out;
  };
  for (const Case& k : {Case{{2, 3, 4, 5}, {2, 3, 5, 6}, {2, 3, 4, 6}}, Case{{2, 1, 4, 5}, {3, 5, 2}, {2, 3, 4, 2}},
                        Case{{4, 3}, {2, 3, 1}, {2, 4, 1}}, Case{{1, 3}, {3, 2}, {1, 2}}}) {
    OpHarness h("type: 'BatchMatMul'", {k.a, k.b});
    ASSERT_EQ(h.out[0].shape(), k.out);
    h.forward();
    const size_t nd = k.out.size();
    const int64_t m = k.out[nd - 2], n = k.out[nd - 1], kk = k.a.back();
    const int64_t batches = shape_count(k.out, 0, static_cast<int>(nd) - 2);
    // The offset of the matrix of `s` that output matrix t reads.
    auto matrix = [&](const Shape& s, int64_t t) {
      int64_t off = 0, stride = s[s.size() - 2] * s.back(), rest = t;
      for (size_t j = 0; j + 2 < nd; ++j) {
        const size_t ax = nd - 3 - j;  // the output's batch axes, last first
        const int64_t coord = rest % k.out[ax];
        rest /= k.out[ax];
        if (j + 2 < s.size()) {
          const int64_t size = s[s.size() - 3 - j];
          off += (size == 1 ? 0 : coord) * stride;
          stride *= size;
        }
      }
      return off;
    };
    for (int64_t t = 0; t < batches; ++t) {
      const float* a = h.in[0].f32() + matrix(k.a, t);
      const float* b = h.in[1].f32() + matrix(k.b, t);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < kk; ++p) s += static_cast<double>(a[i * kk + p]) * b[p * n + j];
          EXPECT_NEAR(h.out[0].f32()[(t * m + i) * n + j], s, 1e-5) << shape_str(k.a) << " x " << shape_str(k.b);
        }
    }
    h.check_gradients();
  }
  try {
    OpHarness bad("type: 'BatchMatMul'", {{2, 3, 4}, {2, 5, 6}});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("(2,3,4) times (2,5,6): the inner sizes 4 and 5 differ"), std::string::npos)
        << e.what();
  }
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

// Without expose_hidden the final state of one forward is the next forward's initial state:
// a sequence fed in two halves gives the second half of what it gives whole, and cont = 0
// at the first timestep starts afresh.
TEST(Recurrent, StateCarriesFromOneForwardToTheNext) {
  for (const char* type : {"RNN", "LSTM", "GRU"}) {
    SCOPED_TRACE(type);
    const std::string layer = std::string("type: '") + type + "' recurrent_param { num_output: 3 }";
    OpHarness whole(layer, {{4, 2, 3}, {4, 2}});
    for (int i = 0; i < 8; ++i) whole.in[1].f32()[i] = i < 2 ? 0.f : 1.f;
    whole.forward();
    OpHarness half(layer, {{2, 2, 3}, {2, 2}});
    for (size_t p = 0; p < half.params.size(); ++p) half.params[p].copy_from(whole.params[p]);
    const int64_t n = half.in[0].numel();
    for (int part = 0; part < 2; ++part) {
      std::copy(whole.in[0].f32() + part * n, whole.in[0].f32() + (part + 1) * n, half.in[0].f32());
      std::copy(whole.in[1].f32() + part * 4, whole.in[1].f32() + (part + 1) * 4, half.in[1].f32());
      half.forward();
    }
    for (int64_t i = 0; i < half.out[0].numel(); ++i)
      EXPECT_NEAR(half.out[0].f32()[i], whole.out[0].f32()[half.out[0].numel() + i], 1e-5) << i;
    // The first half again, starting afresh: what the first forward gave.
    std::copy(whole.in[0].f32(), whole.in[0].f32() + n, half.in[0].f32());
    std::copy(whole.in[1].f32(), whole.in[1].f32() + 4, half.in[1].f32());
    half.forward();
    for (int64_t i = 0; i < half.out[0].numel(); ++i) EXPECT_NEAR(half.out[0].f32()[i], whole.out[0].f32()[i], 1e-5);
  }
}

// oneDNN's RNN-primitive kernels hand batches of many segments (resets inside the batch) to
// the matmul kernel, and the carried state crosses between the two: batches of one, four and
// one segment give what the matmul kernel gives for all three.
TEST(Recurrent, PrimitiveKernelsCarryTheStateAcrossTheirTwoPaths) {
  for (const char* type : {"RNN", "LSTM", "GRU"}) {
    SCOPED_TRACE(type);
    const std::string layer = std::string("type: '") + type + "' recurrent_param { num_output: 3 }";
    OpHarness steps(layer, {{4, 2, 3}, {4, 2}}, proto::TRAIN, 1, {}, "oneDNN");
    OpHarness primitive(layer, {{4, 2, 3}, {4, 2}}, proto::TRAIN, 1, {}, std::string("oneDNN ") + type);
    for (size_t p = 0; p < steps.params.size(); ++p) primitive.params[p].copy_from(steps.params[p]);
    primitive.in[0].copy_from(steps.in[0]);
    const float conts[3][8] = {{0, 0, 1, 1, 1, 1, 1, 1}, {1, 1, 0, 1, 1, 0, 0, 1}, {1, 1, 1, 1, 1, 1, 1, 1}};
    for (int batch = 0; batch < 3; ++batch) {
      std::copy(conts[batch], conts[batch] + 8, steps.in[1].f32());
      std::copy(conts[batch], conts[batch] + 8, primitive.in[1].f32());
      steps.forward();
      primitive.forward();
      for (int64_t i = 0; i < steps.out[0].numel(); ++i)
        EXPECT_NEAR(primitive.out[0].f32()[i], steps.out[0].f32()[i], 1e-5) << "batch " << batch << ", " << i;
    }
  }
}

TEST(Recurrent, BadShapesAreClearErrors) {
  auto error = [](const std::string& layer, const std::vector<Shape>& in, int outputs = 1) {
    try {
      OpHarness h(layer, in, proto::TRAIN, outputs);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("type: 'LSTM' recurrent_param { num_output: 0 }", {{3, 2, 4}, {3, 2}})
                .find("recurrent_param.num_output must be positive"),
            std::string::npos);
  EXPECT_NE(error("type: 'LSTM' recurrent_param { num_output: 5 }", {{3, 2, 4}, {3, 1}})
                .find("bottom 1 (cont) must be (timesteps, streams) = (3, 2)"),
            std::string::npos);
  EXPECT_NE(error("type: 'GRU' recurrent_param { num_output: 5 }", {{3, 2, 4}, {3, 2}, {4, 7}})
                .find("bottom 2 (the static input) must be (2, ...)"),
            std::string::npos);
  EXPECT_NE(
      error("type: 'RNN' recurrent_param { num_output: 5 expose_hidden: true }", {{3, 2, 4}, {3, 2}, {1, 2, 4}}, 2)
          .find("bottom 2 (an initial state) must be"),
      std::string::npos);
  EXPECT_NE(error("type: 'RNN' recurrent_param { num_output: 5 }", {{3}, {3, 2}})
                .find("bottom 0 must be (timesteps, streams, ...)"),
            std::string::npos);
}

// Packed signs: bit i set where x[i * stride] >= 0, bits past n zero. The popcount GEMM
// counts where each row's signs differ from each filter's, on the vector path (where the CPU
// has it) and the scalar one alike, for lengths of 1 to 16 words and filter counts that fill
// one to nine groups of 8 (a second block of 64 included).
TEST(XnorKernels, PopcountGemmCountsSignDisagreementsOnEveryPath) {
  Rng rng(5);
  for (int64_t n : {1, 63, 64, 65, 130, 600, 1000}) {
    std::vector<float> a(static_cast<size_t>(2 * n));
    for (float& v : a) v = rng.gaussian(0.f, 1.f);
    a[0] = 0.f;  // zero counts as positive
    const int64_t words = sign_words(n);
    std::vector<uint64_t> pa(static_cast<size_t>(words) + 1, ~uint64_t{0});
    pack_signs(a.data(), n, 2, pa.data());  // every second element
    EXPECT_EQ(pa.back(), ~uint64_t{0}) << "wrote past its words";
    EXPECT_EQ(pa[static_cast<size_t>(words) - 1] >> 1 >> ((n - 1) % 64), 0u) << "bits past n are zero";
    for (int64_t filters : {1, 8, 13, 70}) {
      const int64_t pad = padded_filters(filters);
      std::vector<float> f(static_cast<size_t>(filters * n));
      for (float& v : f) v = rng.gaussian(0.f, 1.f);
      std::vector<uint64_t> bt(static_cast<size_t>(words * pad), 0), one(static_cast<size_t>(words));
      for (int64_t j = 0; j < filters; ++j) {
        pack_signs(f.data() + j * n, n, 1, one.data());
        for (int64_t w = 0; w < words; ++w) bt[w * pad + j] = one[w];
      }
      // Two rows: the packed a, and its complement within n (every sign differs).
      std::vector<uint64_t> rows(pa.begin(), pa.begin() + words);
      for (int64_t w = 0; w < words; ++w)
        rows.push_back(~pa[w] & (w + 1 < words || n % 64 == 0 ? ~uint64_t{0} : (uint64_t{1} << (n % 64)) - 1));
      for (bool scalar : {false, true}) {
        force_scalar_popcount(scalar);
        std::vector<int32_t> counts(static_cast<size_t>(2 * pad), -1);
        xor_popcount_gemm(rows.data(), 2, words, bt.data(), pad, counts.data());
        for (int64_t j = 0; j < filters; ++j) {
          int64_t differ = 0;
          for (int64_t i = 0; i < n; ++i) differ += (a[2 * i] >= 0.f) != (f[j * n + i] >= 0.f);
          ASSERT_EQ(counts[j], differ) << n << " " << filters << " " << j << " " << popcount_path();
          ASSERT_EQ(counts[pad + j], n - differ) << n << " " << filters << " " << j << " " << popcount_path();
        }
      }
      force_scalar_popcount(false);
    }
  }
}

}  // namespace
}  // namespace bks::test
