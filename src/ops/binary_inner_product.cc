// BinaryInnerProduct: XNOR-Net's inner product, made by bakusoku deploy from an
// InnerProduct that read a Binarize (binarize_layers, passes/insert_binarize.h). It has
// InnerProduct's attributes and blobs and computes y = alpha[j] * (sign(x) . sign(W[j])) +
// b[j], with alpha[j] the mean |W[j]| (so weights already on the binary grid, +-alpha, give
// exactly the InnerProduct of the binarized input). Inference only. The kernel packs both
// sides' signs into bits and counts disagreements with XOR and popcount
// (ops/xnor_kernels.h); the reference kernel multiplies floats.
#include <algorithm>

#include "core/parallel.h"
#include "ops/fused_post_ops.h"
#include "ops/inner_product_attrs.h"
#include "ops/op.h"
#include "ops/weight_grids.h"
#include "ops/xnor_kernels.h"

namespace bks {
namespace {

struct BinaryIpGeometry {
  int64_t m = 0, n = 0, k = 0;
};

BinaryIpGeometry binary_ip_geometry(const Node& node, const Shape& in) {
  const InnerProductAttrs& p = node.attrs.as<InnerProductAttrs>();
  const int axis = canonical_axis(p.axis, static_cast<int>(in.size()), "inner_product_param.axis");
  return {shape_count(in, 0, axis), p.num_output, shape_count(in, axis, static_cast<int>(in.size()))};
}

const OpDef& inner_product_def() {
  static const OpDef* def = OpDefRegistry::get().find("InnerProduct");
  return *def;
}

class BinaryInnerProductDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    if (c.phase == proto::TRAIN) c.fail("BinaryInnerProduct is an inference op (bakusoku deploy makes it), not TRAIN");
    const FusedPostOps& f = c.node.deploy.fusion;
    if (f.residual_sum || f.bounded()) c.fail("BinaryInnerProduct takes only a fused ReLU");
    if (c.node.deploy.precision != Precision::fp32) c.fail("BinaryInnerProduct computes in fp32 around its bits");
    if (c.node.attrs.as<InnerProductAttrs>().num_output <= 0) c.fail("inner_product_param.num_output must be positive");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    inner_product_def().infer(c, in, out);
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    return inner_product_def().params(c, in);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  int64_t output_channels(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().num_output; }
  bool weights_output_last(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().transpose; }
  bool has_bias(const Node& n) const override { return n.attrs.as<InnerProductAttrs>().bias_term; }
};

// W[j]'s values: row j of an (n, k) matrix, or column j of a (k, n) one.
struct WeightRow {
  const float* first;
  int64_t stride;
};
WeightRow weight_row(const float* w, int64_t j, int64_t n, int64_t k, bool transpose) {
  return transpose ? WeightRow{w + j, n} : WeightRow{w + j * k, 1};
}

class BinaryInnerProductReference final : public Kernel {
 public:
  explicit BinaryInnerProductReference(const OpInit& i)
      : Kernel(i), p_(i.node.attrs.as<InnerProductAttrs>()), fusion_(i.node.deploy.fusion) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = binary_ip_geometry(node_, in[0]);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    const float* b = p_.bias_term ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    for (int64_t j = 0; j < g_.n; ++j) {
      const WeightRow r = weight_row(w, j, g_.n, g_.k, p_.transpose);
      const double alpha = binary_scale(r.first, r.stride, g_.k);
      for (int64_t i = 0; i < g_.m; ++i) {
        double dot = 0;
        for (int64_t t = 0; t < g_.k; ++t)
          dot += (x[i * g_.k + t] >= 0.f ? 1.0 : -1.0) * (r.first[t * r.stride] >= 0.f ? 1.0 : -1.0);
        y[i * g_.n + j] = apply_fused_relu(static_cast<float>(alpha * dot + (b ? b[j] : 0.0)), fusion_);
      }
    }
  }

 private:
  InnerProductAttrs p_;
  FusedPostOps fusion_;
  BinaryIpGeometry g_;
};

class BinaryInnerProductKernel final : public Kernel {
 public:
  explicit BinaryInnerProductKernel(const OpInit& i)
      : Kernel(i), p_(i.node.attrs.as<InnerProductAttrs>()), fusion_(i.node.deploy.fusion) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    const BinaryIpGeometry g = binary_ip_geometry(node_, in[0]);
    if (g_.k && g.k != g_.k) fail("input has {} features per item but the weights expect {}", g.k, g_.k);
    g_ = g;
    words_ = sign_words(g_.k);
    n_pad_ = padded_filters(g_.n);
  }
  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    x_bits_.assign(static_cast<size_t>(g_.m * words_), 0);
    w_bits_.assign(static_cast<size_t>(words_ * n_pad_), 0);
    counts_.assign(static_cast<size_t>(g_.m * n_pad_), 0);
    alpha_.assign(static_cast<size_t>(g_.n), 0.f);
    row_.assign(static_cast<size_t>(words_), 0);
    packed_ = false;
  }
  void forward(OpCall& c) override {
    if (!packed_ || !constant_params_) pack_weights(c.params[0]->f32());
    const float* x = c.in[0]->f32();
    const float* b = p_.bias_term ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    // Rows split across threads once there is enough work (a batch of 1 runs on one).
    parallel_ranges(
        g_.m,
        [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) pack_signs(x + i * g_.k, g_.k, 1, x_bits_.data() + i * words_);
          xor_popcount_gemm(x_bits_.data() + lo * words_, hi - lo, words_, w_bits_.data(), n_pad_,
                            counts_.data() + lo * n_pad_);
          // Locals, so the loop over outputs sees nothing it writes could change them.
          const int64_t n = g_.n, k = g_.k, pad = n_pad_;
          const float* alpha = alpha_.data();
          const FusedPostOps f = fusion_;
          for (int64_t i = lo; i < hi; ++i) {
            const int32_t* differ = counts_.data() + i * pad;
            float* out = y + i * n;
            for (int64_t j = 0; j < n; ++j)
              out[j] = apply_fused_relu(alpha[j] * static_cast<float>(k - 2 * differ[j]) + (b ? b[j] : 0.f), f);
          }
        },
        std::max<int64_t>(2, kSerialBelow / std::max<int64_t>(1, words_ * n_pad_)));
  }
  std::string kernel_name() const override { return std::string("XNOR + popcount (") + popcount_path() + ")"; }

 private:
  // Each output's signs, word-major across the outputs (ops/xnor_kernels.h), and its alpha.
  void pack_weights(const float* w) {
    uint64_t* row = row_.data();
    for (int64_t j = 0; j < g_.n; ++j) {
      const WeightRow r = weight_row(w, j, g_.n, g_.k, p_.transpose);
      alpha_[j] = binary_scale(r.first, r.stride, g_.k);
      pack_signs(r.first, g_.k, r.stride, row);
      for (int64_t v = 0; v < words_; ++v) w_bits_[v * n_pad_ + j] = row[v];
    }
    packed_ = true;
  }

  InnerProductAttrs p_;
  FusedPostOps fusion_;
  BinaryIpGeometry g_;
  int64_t words_ = 0, n_pad_ = 0;
  std::vector<uint64_t> x_bits_, w_bits_, row_;
  std::vector<int32_t> counts_;
  std::vector<float> alpha_;
  bool packed_ = false;
};

}  // namespace

BKS_REGISTER_OP_DEF("BinaryInnerProduct", BinaryInnerProductDef);
BKS_REGISTER_ATTRS("BinaryInnerProduct", InnerProductAttrs, inner_product_from_caffe, inner_product_to_caffe);
BKS_REGISTER_KERNEL("BinaryInnerProduct", DeviceKind::cpu, BinaryInnerProductKernel, "xnor", 10, nullptr);
BKS_REGISTER_KERNEL("BinaryInnerProduct", DeviceKind::cpu, BinaryInnerProductReference, "reference", kReferencePriority,
                    nullptr);

}  // namespace bks
