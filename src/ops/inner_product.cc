// InnerProduct: y = x W^T + b over the axes from `axis` on; three fixed-shape GEMMs
// (forward with the bias fused, weight gradient, input gradient) built at prepare time.
#include "ops/conv_int8.h"
#include "ops/inner_product_attrs.h"
#include "ops/matmul.h"
#include "ops/matmul_int8.h"
#include "ops/op.h"
#include "ops/sparse_inner_product.h"

#include <chrono>

namespace bks {

void inner_product_from_caffe(const proto::LayerParameter& l, InnerProductAttrs& a, const std::string&) {
  const proto::InnerProductParameter& p = l.inner_product_param();
  a.num_output = p.num_output();
  a.bias_term = p.bias_term();
  a.weight_filler = filler_from_caffe(p.weight_filler());
  a.bias_filler = filler_from_caffe(p.bias_filler());
  a.axis = p.axis();
  a.transpose = p.transpose();
}
void inner_product_to_caffe(const InnerProductAttrs& a, proto::LayerParameter& l) {
  proto::InnerProductParameter* p = l.mutable_inner_product_param();
  p->set_num_output(static_cast<uint32_t>(a.num_output));
  p->set_bias_term(a.bias_term);
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_transpose(a.transpose);
}
BKS_REGISTER_ATTRS("InnerProduct", InnerProductAttrs, inner_product_from_caffe, inner_product_to_caffe);

namespace {

// Checks the layer's attributes: inner_product_param, fused post-ops (set by bakusoku
// deploy, inference only) and INT8 thresholds.
void check_inner_product(const OpContext& c) {
  if (c.node.attrs.as<InnerProductAttrs>().num_output <= 0) c.fail("inner_product_param.num_output must be positive");
  const FusedPostOps& f = c.node.deploy.fusion;
  if (f.residual_sum) c.fail("a fused residual sum is supported on Convolution only");
  if (f.relu && c.phase == proto::TRAIN) c.fail("fused post-ops are for inference graphs (bakusoku deploy), not TRAIN");
  int8_thresholds(c);
}

// The GEMM for an input of shape `in`: m items of k features each, n outputs per item.
struct InnerProductGeometry {
  int64_t m = 0, n = 0, k = 0;
  Shape out;
};

InnerProductGeometry inner_product_geometry(const OpContext& c, const Shape& in) {
  const InnerProductAttrs& p = c.node.attrs.as<InnerProductAttrs>();
  int axis = canonical_axis(p.axis, static_cast<int>(in.size()), "inner_product_param.axis");
  InnerProductGeometry g;
  g.k = shape_count(in, axis, static_cast<int>(in.size()));
  g.m = shape_count(in, 0, axis);
  g.n = p.num_output;
  g.out = Shape(in.begin(), in.begin() + axis);
  g.out.push_back(g.n);
  return g;
}

class InnerProductDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { check_inner_product(c); }

  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = inner_product_geometry(c, in[0]).out;
  }

  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const InnerProductAttrs& p = c.node.attrs.as<InnerProductAttrs>();
    InnerProductGeometry g = inner_product_geometry(c, in[0]);
    Shape w = p.transpose ? Shape{g.k, g.n} : Shape{g.n, g.k};
    std::vector<ParamDecl> d{{w, p.weight_filler, true}};
    if (p.bias_term) d.push_back({{g.n}, p.bias_filler, true});
    return d;
  }

  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::weighted_linear}); }
  int64_t output_channels(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().num_output; }
  bool weights_output_last(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().transpose; }
  bool has_bias(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().bias_term; }
  void set_bias_term(Node& n) const override { n.attrs.as<InnerProductAttrs>().bias_term = true; }
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>&) const override {
    return n.attrs.as<InnerProductAttrs>().axis == 1 && !n.deploy.fusion.residual_sum ? ChannelFlow::mixes
                                                                                      : ChannelFlow::blocks;
  }
  void set_channels(Node& n, int64_t channels) const override { n.attrs.as<InnerProductAttrs>().num_output = channels; }
};

class InnerProductKernel final : public Kernel {
 public:
  explicit InnerProductKernel(const OpInit& init)
      : Kernel(init),
        p_(init.node.attrs.as<InnerProductAttrs>()),
        fusion_(init.node.deploy.fusion),
        choice_(init.node.deploy.kernel) {
    Int8Thresholds t = int8_thresholds(context());
    int8_threshold_ = t.in;
    int8_out_threshold_ = t.out;
  }

  // The weights were sized for the first input's features; a reshaped input must keep them.
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    InnerProductGeometry g = inner_product_geometry(context(), in[0]);
    if (k_ && g.k != k_) fail("input has {} features per item but the weights expect {}", g.k, k_);
    m_ = g.m;
    n_ = g.n;
    k_ = g.k;
    out_shape_ = g.out;
  }

  // INT8 reads its input in any layout and type (converting it to int8 rows itself) and
  // may write int8 rows; FP32 works on plain rows.
  LayoutRule layout_rule() const override {
    return int8_threshold_ > 0.f ? LayoutRule::any_in_any_out : LayoutRule::plain_only;
  }
  dnnl::memory::desc preferred_output_layout(int, const std::vector<dnnl::memory::desc>&) override {
    auto t = int8_output_type(fusion_.relu && fusion_.relu_slope == 0.f, int8_out_threshold_);
    return t == memory::data_type::f32 ? memory::desc() : plain_md(out_shape_, t);
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    auto& eng = static_cast<CpuBackend&>(backend_).engine();
    const bool t = p_.transpose;  // weights stored [k, n] instead of [n, k]
    int8_.reset();
    sparse_.reset();
    decided_ = false;
    if (int8_threshold_ > 0.f) {
      Int8MatMulSpec spec{
          m_, n_, k_, t, p_.bias_term, fusion_.relu, fusion_.relu_slope, int8_threshold_, int8_out_threshold_};
      memory::desc src = in_layout_.empty() || in_layout_[0].data.ndims == 0 ? plain_md(in[0]) : in_layout_[0];
      int8_ = std::make_unique<Int8MatMul>(
          eng, spec, src, int8_output_type(fusion_.relu && fusion_.relu_slope == 0.f, int8_out_threshold_));
      return;
    }
    fwd_.prepare(eng, 'N', t ? 'N' : 'T', m_, n_, k_, p_.bias_term, fusion_.relu, fusion_.relu_slope,
                 constant_params_ && phase_ != proto::TRAIN, bf16_ && phase_ != proto::TRAIN);
    if (phase_ != proto::TRAIN) return;
    if (t)
      dw_.prepare(eng, 'T', 'N', k_, n_, m_, false);  // dW[k,n] = x^T dy
    else
      dw_.prepare(eng, 'T', 'N', n_, k_, m_, false);  // dW[n,k] = dy^T x
    dx_.prepare(eng, 'N', t ? 'T' : 'N', m_, k_, n_, false);
  }

  void forward(OpCall& c) override {
    const float* b = p_.bias_term ? c.params[1]->f32() : nullptr;
    if (int8_) return int8_->run(stream(), c.in[0]->raw(), c.params[0]->f32(), b, c.out[0]->raw());
    if (!decided_ && may_run_sparse()) choose_sparse_or_dense(c);
    if (sparse_) return sparse_->run(c.in[0]->f32(), m_, b, c.out[0]->f32(), fusion_.relu, fusion_.relu_slope);
    fwd_.run(stream(), c.in[0]->f32(), c.params[0]->f32(), c.out[0]->f32(), b);
  }

  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) {
      if (p_.transpose)
        dw_.run(stream(), x, dy, c.param_grad[0]->f32());
      else
        dw_.run(stream(), dy, x, c.param_grad[0]->f32());
    }
    if (p_.bias_term && c.param_grad[1]) {
      float* db = c.param_grad[1]->f32();
      std::fill_n(db, n_, 0.f);
      for (int64_t i = 0; i < m_; ++i) {
        const float* row = dy + i * n_;
#pragma omp simd
        for (int64_t j = 0; j < n_; ++j) db[j] += row[j];
      }
    }
    if (c.in_grad[0]) dx_.run(stream(), dy, c.params[0]->f32(), c.in_grad[0]->f32());
  }

  std::string kernel_name() const override {
    if (int8_) return "oneDNN matmul " + int8_->name();
    if (sparse_) return fmt::format("sparse CSR ({:.1f}% of weights nonzero){}", 100 * sparse_->density(), tuning_);
    std::string n = "oneDNN matmul " + fwd_.name();
    if (phase_ == proto::TRAIN) n += " / dW " + dw_.name() + " / dx " + dx_.name();
    return n + tuning_;
  }
  // "sparse" or "direct" once the two were weighed; "" for a layer too dense to try.
  std::string tuning_decision() const override {
    if (!decided_ || (!sparse_ && !timed_ && choice_.empty())) return "";
    return sparse_ ? "sparse" : "direct";
  }

 private:
  dnnl::stream& stream() { return static_cast<CpuBackend&>(backend_).stream(); }

  // Inference with weights that never change, in FP32, with at most a plain (leaky) ReLU.
  bool may_run_sparse() const {
    return constant_params_ && phase_ != proto::TRAIN && !bf16_ && !fusion_.residual_sum && !fusion_.bounded();
  }

  // Deploy's saved choice, else: a layer with at most kSparseDensity of its weights nonzero
  // runs both kernels on this first input (three alternating rounds, each one's best time)
  // and keeps the sparse one where it is faster.
  void choose_sparse_or_dense(OpCall& c) {
    constexpr double kSparseDensity = 0.3;
    decided_ = true;
    if (choice_ == "direct") return;
    const float* w = c.params[0]->f32();
    if (choice_.empty() && nonzero_fraction(w, n_ * k_) > kSparseDensity) return;
    auto sparse = std::make_unique<SparseInnerProduct>(w, n_, k_, p_.transpose);
    if (choice_ == "sparse") {
      sparse_ = std::move(sparse);
      return;
    }
    const float* x = c.in[0]->f32();
    const float* b = p_.bias_term ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    auto time_ms = [](auto&& f) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    double dense_ms = 1e300, sparse_ms = 1e300;
    for (int round = 0; round < 3; ++round) {
      dense_ms = std::min(dense_ms, time_ms([&] {
                            fwd_.run(stream(), x, w, y, b);
                            stream().wait();
                          }));
      sparse_ms = std::min(sparse_ms, time_ms([&] { sparse->run(x, m_, b, y, fusion_.relu, fusion_.relu_slope); }));
    }
    timed_ = true;
    tuning_ = fmt::format(" (autotuned: sparse {:.4f} ms vs dense {:.4f} ms)", sparse_ms, dense_ms);
    if (sparse_ms < dense_ms) sparse_ = std::move(sparse);
  }

  InnerProductAttrs p_;
  MatMul fwd_, dw_, dx_;
  FusedPostOps fusion_;
  float int8_threshold_ = 0.f, int8_out_threshold_ = 0.f;
  std::unique_ptr<Int8MatMul> int8_;
  std::string choice_;  // deploy.kernel: "sparse", "direct" (dense) or "" (choose at the first forward)
  std::unique_ptr<SparseInnerProduct> sparse_;
  bool decided_ = false, timed_ = false;
  std::string tuning_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  Shape out_shape_;
};

}  // namespace

BKS_REGISTER_OP_DEF("InnerProduct", InnerProductDef);
BKS_REGISTER_KERNEL_FOR("InnerProduct", ::bks::DeviceKind::cpu, InnerProductKernel, "oneDNN", 10, nullptr,
                        {::bks::Precision::fp32, ::bks::Precision::bf16, ::bks::Precision::int8});

}  // namespace bks
