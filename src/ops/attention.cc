// MultiHeadAttention (attention_param): self-attention over a (T, N, D) bottom, time first
// as Caffe's recurrent layers. q, k, v = x W_qkv^T + b_qkv, split into num_heads heads of
// head_dim; per (stream, head), the context is
//   SOFTMAX:   softmax(q k^T / sqrt(head_dim)) v          (T x T weights: quadratic in T)
//   PERFORMER: phi(q) (phi(k)^T v) / phi(q) (phi(k)^T 1)  (FAVOR+: linear in T)
// and the top is the heads' contexts times W_o^T plus b_o. `causal` lets timestep t see
// timesteps <= t only (PERFORMER then keeps running sums over time).
//
// FAVOR+ (Choromanski et al., "Rethinking attention with Performers"): with x~ = x /
// head_dim^(1/4), exp(q~ . k~) = E[phi(q~) . phi(k~)] for phi(x)_i = exp(w_i . x - |x|^2 / 2)
// and w_i ~ N(0, I). The num_features w_i are the rows of a blob (omega) drawn in blocks of
// head_dim orthogonal directions, each row scaled to the length of a Gaussian vector. The
// blob is not learned; it is drawn when it is still all zeros and, in training with
// redraw_interval > 0, at every multiple of that step, from (seed, layer, step): a resumed
// run draws the same features.
//
// Stabilisers: a query's features are divided by their largest (the common factor cancels
// between numerator and denominator), all keys' features by the largest over the sequence
// (likewise), so exp never overflows and gradients that treat them as constants are exact.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/backend.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/fixed_gemms.h"
#include "ops/op.h"
#include "ops/vector_math.h"

namespace bks {
namespace {

constexpr const char* kAttentionKernels[] = {"SOFTMAX", "PERFORMER"};

struct AttentionAttrs final : AttrsOf<AttentionAttrs> {
  enum KernelKind { softmax, performer };  // AttentionParameter.Kernel's values
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t num_output = 0;
  bool causal = false;
  float dropout = 0.f;
  int kernel = softmax;
  int64_t num_features = 128;
  int64_t redraw_interval = 0;
  bool bias_term = true;
  FillerSpec weight_filler, bias_filler;
  AttentionAttrs() { weight_filler.type = "xavier"; }
  void visit(AttrVisitor& v) override {
    v.field("num_heads", num_heads);
    v.field("head_dim", head_dim);
    v.field("num_output", num_output);
    v.field("causal", causal);
    v.field("dropout", dropout);
    v.field("kernel", kernel, kAttentionKernels);
    v.field("num_features", num_features);
    v.field("redraw_interval", redraw_interval);
    v.field("bias_term", bias_term);
    v.field("weight_filler", weight_filler);
    v.field("bias_filler", bias_filler);
  }
};

void attention_from_caffe(const proto::LayerParameter& l, AttentionAttrs& a, const std::string&) {
  const proto::AttentionParameter& p = l.attention_param();
  a.num_heads = p.num_heads();
  a.head_dim = p.head_dim();
  a.num_output = p.num_output();
  a.causal = p.causal();
  a.dropout = p.dropout();
  a.kernel = static_cast<int>(p.kernel());
  a.num_features = p.num_features();
  a.redraw_interval = p.redraw_interval();
  a.bias_term = p.bias_term();
  if (p.has_weight_filler()) a.weight_filler = filler_from_caffe(p.weight_filler());
  a.bias_filler = filler_from_caffe(p.bias_filler());
}
void attention_to_caffe(const AttentionAttrs& a, proto::LayerParameter& l) {
  proto::AttentionParameter* p = l.mutable_attention_param();
  p->set_num_heads(static_cast<uint32_t>(a.num_heads));
  p->set_head_dim(static_cast<uint32_t>(a.head_dim));
  p->set_num_output(static_cast<uint32_t>(a.num_output));
  p->set_causal(a.causal);
  p->set_dropout(a.dropout);
  p->set_kernel(static_cast<proto::AttentionParameter::Kernel>(a.kernel));
  p->set_num_features(static_cast<uint32_t>(a.num_features));
  p->set_redraw_interval(static_cast<uint32_t>(a.redraw_interval));
  p->set_bias_term(a.bias_term);
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
}
BKS_REGISTER_ATTRS("MultiHeadAttention", AttentionAttrs, attention_from_caffe, attention_to_caffe);

// The widths a (T, N, D) bottom gives, checked.
struct AttentionDims {
  int64_t t, n, d, heads, head_dim, out;
  int64_t inner() const { return heads * head_dim; }
};
AttentionDims attention_dims(const OpContext& c, const Shape& x) {
  const AttentionAttrs& a = c.node.attrs.as<AttentionAttrs>();
  if (x.size() != 3) c.fail("bottom must be (timesteps, streams, width), got {}", shape_str(x));
  AttentionDims d{x[0], x[1], x[2], a.num_heads, a.head_dim, a.num_output > 0 ? a.num_output : x[2]};
  if (d.head_dim == 0) {
    if (d.d % d.heads != 0)
      c.fail("attention_param.num_heads {} does not divide the bottom's width {} (or set head_dim)", d.heads, d.d);
    d.head_dim = d.d / d.heads;
  }
  return d;
}

class AttentionDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const AttentionAttrs& a = c.node.attrs.as<AttentionAttrs>();
    if (a.num_heads <= 0) c.fail("attention_param.num_heads must be positive");
    if (!(a.dropout >= 0.f && a.dropout < 1.f)) c.fail("attention_param.dropout must be in [0, 1), got {}", a.dropout);
    if (a.kernel == AttentionAttrs::performer) {
      if (a.num_features <= 0) c.fail("attention_param.num_features must be positive with kernel PERFORMER");
      if (a.dropout > 0.f)
        c.fail(
            "attention_param.dropout drops attention weights, which kernel PERFORMER never forms; use a Dropout layer");
    }
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const AttentionDims d = attention_dims(c, in[0]);
    out[0] = {d.t, d.n, d.out};
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::mixes_axis0}); }
  // W_qkv (3 heads head_dim, D), b_qkv, W_o (out, heads head_dim), b_o; PERFORMER's
  // features (num_features, head_dim) last, not learned.
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const AttentionAttrs& a = c.node.attrs.as<AttentionAttrs>();
    const AttentionDims d = attention_dims(c, in[0]);
    std::vector<ParamDecl> p{{{3 * d.inner(), d.d}, a.weight_filler, true}};
    if (a.bias_term) p.push_back({{3 * d.inner()}, a.bias_filler, true});
    p.push_back({{d.out, d.inner()}, a.weight_filler, true});
    if (a.bias_term) p.push_back({{d.out}, a.bias_filler, true});
    if (a.kernel == AttentionAttrs::performer) p.push_back({{a.num_features, d.head_dim}, FillerSpec{}, false});
    return p;
  }
};

// C (m x n, ldc) = alpha op(A) op(B) (+ C with accumulate), row-major with leading
// dimensions: oneDNN's sgemm (single-threaded inside a parallel region), or loops in double
// for the reference.
void gemm(bool fast, char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate = false) {
  if (fast) {
    dnnl::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, accumulate ? 1.f : 0.f, c, ldc);
    return;
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += static_cast<double>(ta == 'N' ? a[i * lda + p] : a[p * lda + i]) *
               (tb == 'N' ? b[p * ldb + j] : b[j * ldb + p]);
      c[i * ldc + j] = static_cast<float>(alpha * acc + (accumulate ? c[i * ldc + j] : 0.0));
    }
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// omega (m, d): blocks of d orthonormal directions (Gram-Schmidt of Gaussian vectors), each
// row then scaled to the length of an independent Gaussian vector of d entries, so every row
// is distributed as N(0, I) while the rows of a block are exactly orthogonal.
void draw_features(uint64_t key, int64_t m, int64_t d, float* omega) {
  Rng rng(key);
  std::vector<double> block(static_cast<size_t>(d * d));
  for (int64_t r0 = 0; r0 < m; r0 += d) {
    for (double& v : block) v = rng.gaussian(0.f, 1.f);
    for (int64_t i = 0; i < d; ++i) {
      double* bi = block.data() + i * d;
      for (int64_t j = 0; j < i; ++j) {
        const double* bj = block.data() + j * d;
        double p = 0;
        for (int64_t e = 0; e < d; ++e) p += bi[e] * bj[e];
        for (int64_t e = 0; e < d; ++e) bi[e] -= p * bj[e];
      }
      double norm = 0;
      for (int64_t e = 0; e < d; ++e) norm += bi[e] * bi[e];
      norm = std::sqrt(norm);
      for (int64_t e = 0; e < d; ++e) bi[e] /= norm;
    }
    for (int64_t i = 0; i < d && r0 + i < m; ++i) {
      double len = 0;
      for (int64_t e = 0; e < d; ++e) {
        const double g = rng.gaussian(0.f, 1.f);
        len += g * g;
      }
      len = std::sqrt(len);
      for (int64_t e = 0; e < d; ++e) omega[(r0 + i) * d + e] = static_cast<float>(block[i * d + e] * len);
    }
  }
}

class AttentionKernel : public Kernel {
 public:
  AttentionKernel(const OpInit& i, bool fast) : Kernel(i), a_(i.node.attrs.as<AttentionAttrs>()), fast_(fast) {}
  std::string kernel_name() const override {
    return std::string(fast_ ? "oneDNN sgemm" : "loops") + (performer() ? " performer" : " softmax");
  }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    dims_ = attention_dims(context(), in[0]);
    const int64_t t = dims_.t, rows = t * dims_.n, inner = dims_.inner(), hd = dims_.head_dim, m = a_.num_features;
    pairs_ = dims_.n * dims_.heads;
    qkv_.assign(static_cast<size_t>(rows * 3 * inner), 0.f);
    ctx_.assign(static_cast<size_t>(rows * inner), 0.f);
    if (performer()) {
      qf_.assign(static_cast<size_t>(pairs_ * t * m), 0.f);
      kf_.assign(qf_.size(), 0.f);
      den_.assign(static_cast<size_t>(pairs_ * t), 0.f);
      scratch_size_ = t * hd + 2 * t * m + 2 * m * hd + 2 * m + t + 2 * kChunk * kChunk;
    } else {
      p_.assign(static_cast<size_t>(pairs_ * t * t), 0.f);
      scratch_size_ = (a_.dropout > 0.f ? 2 : 1) * t * t;  // dS; with dropout, the kept weights too
    }
    scratch_.assign(static_cast<size_t>(threads()), {});
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    const int64_t rows = dims_.t * dims_.n, inner = dims_.inner();
    gemms_.clear();
    g_qkv_ = gemms_.add({'N', 'T', rows, 3 * inner, dims_.d, a_.bias_term, constant_params_});
    g_out_ = gemms_.add({'N', 'T', rows, dims_.out, inner, a_.bias_term, constant_params_});
    if (!constant_params_) {
      g_dwo_ = gemms_.add({'T', 'N', dims_.out, inner, rows});
      g_dctx_ = gemms_.add({'N', 'N', rows, inner, dims_.out});
      g_dwqkv_ = gemms_.add({'T', 'N', 3 * inner, dims_.d, rows});
      g_dx_ = gemms_.add({'N', 'N', rows, dims_.d, 3 * inner});
    }
    gemms_.prepare(fast_ ? &static_cast<CpuBackend&>(backend_).engine() : nullptr, fast_);
  }

  void forward(OpCall& c) override {
    const Blobs b = blobs(c);
    run_gemm(g_qkv_, c.in[0]->f32(), b.w_qkv, qkv_.data(), b.b_qkv);
    if (performer()) draw_if_due(c, b.omega);
    const bool drop = !performer() && a_.dropout > 0.f && phase_ == proto::TRAIN;
    if (drop) key_ = stream_key(seed_, name_, c.step);
    for_pairs([&](int64_t pair, float* scratch) {
      if (performer())
        performer_forward(pair, b.omega, scratch);
      else
        softmax_forward(pair, drop, scratch);
    });
    run_gemm(g_out_, ctx_.data(), b.w_o, c.out[0]->f32(), b.b_o);
  }

  void backward(OpCall& c) override {
    const Blobs b = blobs(c);
    const float* dy = c.out_grad[0]->f32();
    const int64_t rows = dims_.t * dims_.n, inner = dims_.inner();
    const int wo = a_.bias_term ? 2 : 1;
    if (Tensor* g = grad(c, wo)) run_gemm(g_dwo_, dy, ctx_.data(), g->f32());
    if (a_.bias_term)
      if (Tensor* g = grad(c, 3)) sum_rows(dy, rows, dims_.out, g->f32());
    dctx_.resize(ctx_.size());
    dqkv_.resize(qkv_.size());
    run_gemm(g_dctx_, dy, b.w_o, dctx_.data());
    const bool drop = !performer() && a_.dropout > 0.f && phase_ == proto::TRAIN;
    for_pairs([&](int64_t pair, float* scratch) {
      if (performer())
        performer_backward(pair, b.omega, scratch);
      else
        softmax_backward(pair, drop, scratch);
    });
    if (Tensor* g = grad(c, 0)) run_gemm(g_dwqkv_, dqkv_.data(), c.in[0]->f32(), g->f32());
    if (a_.bias_term)
      if (Tensor* g = grad(c, 1)) sum_rows(dqkv_.data(), rows, 3 * inner, g->f32());
    if (c.in_grad[0]) run_gemm(g_dx_, dqkv_.data(), b.w_qkv, c.in_grad[0]->f32());
  }

 private:
  struct Blobs {
    const float *w_qkv, *b_qkv, *w_o, *b_o;
    float* omega;
  };
  Blobs blobs(OpCall& c) const {
    const bool bias = a_.bias_term;
    return {c.params[0]->f32(), bias ? c.params[1]->f32() : nullptr, c.params[bias ? 2 : 1]->f32(),
            bias ? c.params[3]->f32() : nullptr, performer() ? c.params.back()->f32() : nullptr};
  }
  static Tensor* grad(OpCall& c, int i) {
    return i < static_cast<int>(c.param_grad.size()) ? c.param_grad[static_cast<size_t>(i)] : nullptr;
  }
  bool performer() const { return a_.kernel == AttentionAttrs::performer; }
  static int64_t threads() { return std::max(1, omp_get_max_threads()); }
  void run_gemm(int id, const float* a, const float* b, float* out, const float* bias = nullptr) {
    gemms_.run(fast_ ? &static_cast<CpuBackend&>(backend_).stream() : nullptr, id, a, b, out, bias);
  }

  // Each (stream, head) pair is independent: in parallel, one per thread with single-threaded
  // GEMMs, when there are enough of them; else one after another with threaded GEMMs.
  template <class F>
  void for_pairs(F&& f) {
    const int64_t nt = threads();
    if (static_cast<int64_t>(scratch_.size()) < nt) scratch_.resize(static_cast<size_t>(nt));
    auto scratch = [&](int64_t thread) {
      std::vector<float>& s = scratch_[static_cast<size_t>(thread)];
      if (static_cast<int64_t>(s.size()) < scratch_size_) s.assign(static_cast<size_t>(scratch_size_), 0.f);
      return s.data();
    };
    if (nt > 1 && pairs_ >= nt) {
#pragma omp parallel for schedule(static)
      for (int64_t pair = 0; pair < pairs_; ++pair) f(pair, scratch(omp_get_thread_num()));
    } else {
      for (int64_t pair = 0; pair < pairs_; ++pair) f(pair, scratch(0));
    }
  }

  // Where pair (stream n, head h) finds its q, k, v (rows t at stride ld()) and its context.
  int64_t ld() const { return dims_.n * 3 * dims_.inner(); }
  int64_t ldo() const { return dims_.n * dims_.inner(); }
  int64_t q_off(int64_t pair) const {
    const int64_t n = pair / dims_.heads, h = pair % dims_.heads;
    return n * 3 * dims_.inner() + h * dims_.head_dim;
  }
  int64_t o_off(int64_t pair) const {
    const int64_t n = pair / dims_.heads, h = pair % dims_.heads;
    return n * dims_.inner() + h * dims_.head_dim;
  }

  // ---- SOFTMAX ----

  // out = in times dropout's mask: 1 / (1 - dropout) where a weight is kept, else 0, as a
  // pure function of (step, pair, index).
  void times_mask(int64_t pair, const float* in, float* out) const {
    const int64_t tt = dims_.t * dims_.t;
    const float ratio = a_.dropout, scale = 1.f / (1.f - ratio);
    const uint64_t base = static_cast<uint64_t>(pair * tt), key = key_;
#pragma omp simd
    for (int64_t i = 0; i < tt; ++i)
      out[i] = uniform01(key, base + static_cast<uint64_t>(i)) >= ratio ? in[i] * scale : 0.f;
  }

  void softmax_forward(int64_t pair, bool drop, float* scratch) {
    const int64_t t = dims_.t, hd = dims_.head_dim, inner = dims_.inner();
    const float* q = qkv_.data() + q_off(pair);
    const float *k = q + inner, *v = q + 2 * inner;
    float* p = p_.data() + pair * t * t;
    gemm(fast_, 'N', 'T', t, t, hd, 1.f / std::sqrt(static_cast<float>(hd)), q, ld(), k, ld(), p, t);
    for (int64_t r = 0; r < t; ++r) {
      float* row = p + r * t;
      const int64_t len = a_.causal ? r + 1 : t;
      const float mx = *std::max_element(row, row + len);
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < len; ++j) {
        row[j] = exp_vec(row[j] - mx);
        sum += row[j];
      }
      const float inv = 1.f / sum;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) row[j] *= inv;
      std::fill(row + len, row + t, 0.f);
    }
    const float* weights = p;
    if (drop) {
      times_mask(pair, p, scratch);
      weights = scratch;
    }
    gemm(fast_, 'N', 'N', t, hd, t, 1.f, weights, t, v, ld(), ctx_.data() + o_off(pair), ldo());
  }

  // dV = W^T dO (W the weights after dropout); dW = dO V^T; through dropout to dP; then
  // dS = P (dP - rowsum(dP P)); dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d).
  void softmax_backward(int64_t pair, bool drop, float* scratch) {
    const int64_t t = dims_.t, hd = dims_.head_dim, inner = dims_.inner();
    const float* q = qkv_.data() + q_off(pair);
    const float *k = q + inner, *v = q + 2 * inner;
    float* dq = dqkv_.data() + q_off(pair);
    float *dk = dq + inner, *dv = dq + 2 * inner;
    const float* d_o = dctx_.data() + o_off(pair);
    const float* p = p_.data() + pair * t * t;
    float *w = scratch, *ds = drop ? scratch + t * t : scratch;
    if (drop) times_mask(pair, p, w);
    gemm(fast_, 'T', 'N', t, hd, t, 1.f, drop ? w : p, t, d_o, ldo(), dv, ld());
    gemm(fast_, 'N', 'T', t, t, hd, 1.f, d_o, ldo(), v, ld(), ds, t);
    if (drop) times_mask(pair, ds, ds);
    for (int64_t r = 0; r < t; ++r) {
      float* row = ds + r * t;
      const float* pr = p + r * t;
      const float s = dot(row, pr, t);
#pragma omp simd
      for (int64_t j = 0; j < t; ++j) row[j] = pr[j] * (row[j] - s);
    }
    const float alpha = 1.f / std::sqrt(static_cast<float>(hd));
    gemm(fast_, 'N', 'N', t, hd, t, alpha, ds, t, k, ld(), dq, ld());
    gemm(fast_, 'T', 'N', t, hd, t, alpha, ds, t, q, ld(), dk, ld());
  }

  // ---- PERFORMER ----

  void draw_if_due(const OpCall& c, float* omega) {
    const int64_t size = a_.num_features * dims_.head_dim;
    const bool blank = std::all_of(omega, omega + size, [](float v) { return v == 0.f; });
    const bool due = phase_ == proto::TRAIN && a_.redraw_interval > 0 && c.step % a_.redraw_interval == 0;
    if (!blank && !due) return;
    const int64_t draw = a_.redraw_interval > 0 ? c.step / a_.redraw_interval : 0;
    draw_features(stream_key(seed_, name_ + "/features", draw), a_.num_features, dims_.head_dim, omega);
  }

  // Features of q (rows at stride ld) into f (t, m): exp(omega q~ - the row's max).
  void query_features(const float* q, const float* omega, float* f) const {
    const int64_t t = dims_.t, m = a_.num_features, hd = dims_.head_dim;
    gemm(fast_, 'N', 'T', t, m, hd, scale4(), q, ld(), omega, hd, f, m);
    for (int64_t r = 0; r < t; ++r) {
      float* row = f + r * m;
      const float mx = *std::max_element(row, row + m);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) row[i] = exp_vec(row[i] - mx);
    }
  }
  // Features of k into f: exp(omega k~ - |k~|^2 / 2 - the largest such exponent of all keys).
  void key_features(const float* k, const float* omega, float* f) const {
    const int64_t t = dims_.t, m = a_.num_features, hd = dims_.head_dim;
    gemm(fast_, 'N', 'T', t, m, hd, scale4(), k, ld(), omega, hd, f, m);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < t; ++r) {
      const float half_sq = 0.5f * scale4() * scale4() * dot(k + r * ld(), k + r * ld(), hd);
      float* row = f + r * m;
      for (int64_t i = 0; i < m; ++i) {
        row[i] -= half_sq;
        mx = std::max(mx, row[i]);
      }
    }
    for (int64_t i = 0; i < t * m; ++i) f[i] = exp_vec(f[i] - mx);
  }
  float scale4() const { return 1.f / std::sqrt(std::sqrt(static_cast<float>(dims_.head_dim))); }

  void performer_forward(int64_t pair, const float* omega, float* scratch) {
    const int64_t t = dims_.t, hd = dims_.head_dim, inner = dims_.inner(), m = a_.num_features;
    const float* q = qkv_.data() + q_off(pair);
    const float *k = q + inner, *v = q + 2 * inner;
    float *qf = qf_.data() + pair * t * m, *kf = kf_.data() + pair * t * m, *den = den_.data() + pair * t;
    float* o = ctx_.data() + o_off(pair);
    query_features(q, omega, qf);
    key_features(k, omega, kf);
    float *kv = scratch, *ks = scratch + m * hd;
    if (a_.causal) {
      causal_forward(qf, kf, v, o, den, scratch);
      return;
    }
    gemm(fast_, 'T', 'N', m, hd, t, 1.f, kf, m, v, ld(), kv, hd);
    sum_rows(kf, t, m, ks);
    gemm(fast_, 'N', 'N', t, hd, m, 1.f, qf, m, kv, hd, o, ldo());
    for (int64_t r = 0; r < t; ++r) finish_row(o + r * ldo(), dot(qf + r * m, ks, m), den + r);
  }
  // A context row is its numerator over the denominator (floored: keys whose features all
  // underflowed give a zero row, not NaN).
  void finish_row(float* orow, float dn, float* den) const {
    *den = std::max(dn, FLT_MIN);
    const float inv = 1.f / *den;
    for (int64_t j = 0; j < dims_.head_dim; ++j) orow[j] *= inv;
  }

  // With g_t = dO_t / den_t and e_t = -(dO_t . O_t) / den_t (the denominator's gradient):
  // dqf = g KV^T + e ks^T, dKV = qf^T g, dks = qf^T e, dkf = V dKV^T + 1 dks^T, dV = kf dKV
  // (causal: the same sums over s <= t, kept running forwards for dqf, backwards for the
  // rest). Then through the features: dq~ = (dqf . qf) omega, dk~ = (dkf . kf) omega - k~
  // rowsum(dkf . kf).
  void performer_backward(int64_t pair, const float* omega, float* scratch) {
    const int64_t t = dims_.t, hd = dims_.head_dim, inner = dims_.inner(), m = a_.num_features;
    const float* q = qkv_.data() + q_off(pair);
    const float *k = q + inner, *v = q + 2 * inner;
    float* dq = dqkv_.data() + q_off(pair);
    float *dk = dq + inner, *dv = dq + 2 * inner;
    const float *qf = qf_.data() + pair * t * m, *kf = kf_.data() + pair * t * m, *den = den_.data() + pair * t;
    const float *o = ctx_.data() + o_off(pair), *d_o = dctx_.data() + o_off(pair);
    float* g = scratch;
    float* e = g + t * hd;
    float* dqf = e + t;
    float* dkf = dqf + t * m;
    float* kv = dkf + t * m;  // then what the causal form uses instead: S, z, A, B
    float* dkv = kv + m * hd;
    float* ks = dkv + m * hd;
    float* dks = ks + m;
    for (int64_t r = 0; r < t; ++r) {
      const float inv = 1.f / den[r];
      for (int64_t j = 0; j < hd; ++j) g[r * hd + j] = d_o[r * ldo() + j] * inv;
      e[r] = -dot(d_o + r * ldo(), o + r * ldo(), hd) * inv;
    }
    if (a_.causal) {
      causal_backward(qf, kf, v, g, e, dqf, dkf, dv, kv);
    } else {
      gemm(fast_, 'T', 'N', m, hd, t, 1.f, kf, m, v, ld(), kv, hd);
      sum_rows(kf, t, m, ks);
      gemm(fast_, 'N', 'T', t, m, hd, 1.f, g, hd, kv, hd, dqf, m);
      for (int64_t r = 0; r < t; ++r) axpy(e[r], ks, dqf + r * m, m);
      gemm(fast_, 'T', 'N', m, hd, t, 1.f, qf, m, g, hd, dkv, hd);
      std::fill(dks, dks + m, 0.f);
      for (int64_t r = 0; r < t; ++r) axpy(e[r], qf + r * m, dks, m);
      gemm(fast_, 'N', 'T', t, m, hd, 1.f, v, ld(), dkv, hd, dkf, m);
      for (int64_t r = 0; r < t; ++r) axpy(1.f, dks, dkf + r * m, m);
      gemm(fast_, 'N', 'N', t, hd, m, 1.f, kf, m, dkv, hd, dv, ld());
    }
    for (int64_t i = 0; i < t * m; ++i) dqf[i] *= qf[i];
    gemm(fast_, 'N', 'N', t, hd, m, scale4(), dqf, m, omega, hd, dq, ld());
    for (int64_t i = 0; i < t * m; ++i) dkf[i] *= kf[i];
    gemm(fast_, 'N', 'N', t, hd, m, scale4(), dkf, m, omega, hd, dk, ld());
    const float s2 = scale4() * scale4();
    for (int64_t r = 0; r < t; ++r) {
      float rs = 0.f;
      for (int64_t i = 0; i < m; ++i) rs += dkf[r * m + i];
      axpy(-s2 * rs, k + r * ld(), dk + r * ld(), hd);
    }
  }

  // Causal PERFORMER in chunks of kChunk timesteps, so that nearly all of it is GEMMs: a
  // chunk's rows see the running sums of the chunks before it (S = sum kf^T v, z = sum kf)
  // and, through A = tril(qf kf^T), the chunk's own timesteps up to theirs.
  static constexpr int64_t kChunk = 64;

  // The chunk [r0, r0 + c): A (c x c, row stride kChunk) = tril(qf kf^T).
  void chunk_weights(const float* qf, const float* kf, int64_t r0, int64_t c, float* a) const {
    const int64_t m = a_.num_features;
    gemm(fast_, 'N', 'T', c, c, m, 1.f, qf + r0 * m, m, kf + r0 * m, m, a, kChunk);
    for (int64_t i = 0; i < c; ++i) std::fill(a + i * kChunk + i + 1, a + i * kChunk + c, 0.f);
  }

  // scratch: S (m x hd), z (m), A (kChunk x kChunk).
  void causal_forward(const float* qf, const float* kf, const float* v, float* o, float* den, float* scratch) const {
    const int64_t t = dims_.t, hd = dims_.head_dim, m = a_.num_features;
    float *s = scratch, *z = s + m * hd, *a = z + m;
    std::fill(s, s + m * hd + m, 0.f);
    for (int64_t r0 = 0; r0 < t; r0 += kChunk) {
      const int64_t c = std::min(kChunk, t - r0);
      const float *qc = qf + r0 * m, *kc = kf + r0 * m, *vc = v + r0 * ld();
      float* oc = o + r0 * ldo();
      chunk_weights(qf, kf, r0, c, a);
      gemm(fast_, 'N', 'N', c, hd, m, 1.f, qc, m, s, hd, oc, ldo());
      gemm(fast_, 'N', 'N', c, hd, c, 1.f, a, kChunk, vc, ld(), oc, ldo(), true);
      for (int64_t i = 0; i < c; ++i) {
        float dn = dot(qc + i * m, z, m);
        for (int64_t j = 0; j <= i; ++j) dn += a[i * kChunk + j];
        finish_row(oc + i * ldo(), dn, den + r0 + i);
      }
      gemm(fast_, 'T', 'N', m, hd, c, 1.f, kc, m, vc, ld(), s, hd, true);
      for (int64_t i = 0; i < c; ++i) axpy(1.f, kc + i * m, z, m);
    }
  }

  // With B = tril(g v^T + e 1^T) per chunk (B[t, s] = g_t . v_s + e_t for s <= t):
  // dqf = g S^T + e z^T + B kf (S, z the sums before the chunk, forwards), and with R, r
  // the sums of qf^T g, qf^T e over the chunks after it (backwards): dkf = v R^T + 1 r^T
  // + B^T qf, dv = kf R + A^T g. scratch: S (m x hd), z (m), A and B (kChunk x kChunk).
  void causal_backward(const float* qf, const float* kf, const float* v, const float* g, const float* e, float* dqf,
                       float* dkf, float* dv, float* scratch) const {
    const int64_t t = dims_.t, hd = dims_.head_dim, m = a_.num_features;
    float *s = scratch, *z = s + m * hd, *a = z + m, *b = a + kChunk * kChunk;
    auto chunk_b = [&](int64_t r0, int64_t c) {
      gemm(fast_, 'N', 'T', c, c, hd, 1.f, g + r0 * hd, hd, v + r0 * ld(), ld(), b, kChunk);
      for (int64_t i = 0; i < c; ++i) {
        float* row = b + i * kChunk;
        for (int64_t j = 0; j <= i; ++j) row[j] += e[r0 + i];
        std::fill(row + i + 1, row + c, 0.f);
      }
    };
    std::fill(s, s + m * hd + m, 0.f);
    for (int64_t r0 = 0; r0 < t; r0 += kChunk) {
      const int64_t c = std::min(kChunk, t - r0);
      const float *kc = kf + r0 * m, *vc = v + r0 * ld();
      float* dqc = dqf + r0 * m;
      chunk_b(r0, c);
      gemm(fast_, 'N', 'T', c, m, hd, 1.f, g + r0 * hd, hd, s, hd, dqc, m);
      for (int64_t i = 0; i < c; ++i) axpy(e[r0 + i], z, dqc + i * m, m);
      gemm(fast_, 'N', 'N', c, m, c, 1.f, b, kChunk, kc, m, dqc, m, true);
      gemm(fast_, 'T', 'N', m, hd, c, 1.f, kc, m, vc, ld(), s, hd, true);
      for (int64_t i = 0; i < c; ++i) axpy(1.f, kc + i * m, z, m);
    }
    float *r = s, *rr = z;  // now the sums over later chunks
    std::fill(r, r + m * hd + m, 0.f);
    for (int64_t r0 = (t - 1) / kChunk * kChunk; r0 >= 0; r0 -= kChunk) {
      const int64_t c = std::min(kChunk, t - r0);
      const float *qc = qf + r0 * m, *kc = kf + r0 * m, *vc = v + r0 * ld(), *gc = g + r0 * hd;
      float *dkc = dkf + r0 * m, *dvc = dv + r0 * ld();
      chunk_b(r0, c);
      chunk_weights(qf, kf, r0, c, a);
      gemm(fast_, 'N', 'T', c, m, hd, 1.f, vc, ld(), r, hd, dkc, m);
      for (int64_t i = 0; i < c; ++i) axpy(1.f, rr, dkc + i * m, m);
      gemm(fast_, 'T', 'N', c, m, c, 1.f, b, kChunk, qc, m, dkc, m, true);
      gemm(fast_, 'N', 'N', c, hd, m, 1.f, kc, m, r, hd, dvc, ld());
      gemm(fast_, 'T', 'N', c, hd, c, 1.f, a, kChunk, gc, hd, dvc, ld(), true);
      gemm(fast_, 'T', 'N', m, hd, c, 1.f, qc, m, gc, hd, r, hd, true);
      for (int64_t i = 0; i < c; ++i) axpy(e[r0 + i], qc + i * m, rr, m);
    }
  }

  AttentionAttrs a_;
  bool fast_;
  AttentionDims dims_{};
  int64_t pairs_ = 0, scratch_size_ = 0;
  uint64_t key_ = 0;
  std::vector<float> qkv_, ctx_, dqkv_, dctx_;
  std::vector<float> p_;                     // SOFTMAX: every pair's (T, T) weights
  std::vector<float> qf_, kf_, den_;         // PERFORMER: features and denominators
  std::vector<std::vector<float>> scratch_;  // per thread
  FixedGemms gemms_;
  int g_qkv_ = -1, g_out_ = -1, g_dwo_ = -1, g_dctx_ = -1, g_dwqkv_ = -1, g_dx_ = -1;
};

template <bool Fast>
class AttentionKernelOf final : public AttentionKernel {
 public:
  explicit AttentionKernelOf(const OpInit& i) : AttentionKernel(i, Fast) {}
};

}  // namespace

BKS_REGISTER_OP_DEF("MultiHeadAttention", AttentionDef);
BKS_REGISTER_KERNEL("MultiHeadAttention", ::bks::DeviceKind::cpu, AttentionKernelOf<false>, "loops",
                    ::bks::kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("MultiHeadAttention", ::bks::DeviceKind::cpu, AttentionKernelOf<true>, "oneDNN", 10, nullptr);

}  // namespace bks
