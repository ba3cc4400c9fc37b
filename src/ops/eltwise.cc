// Eltwise: SUM (with per-input coefficients), PROD and MAX of same-shaped inputs.
#include <algorithm>
#include <cfloat>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kEltwiseOps[] = {"PROD", "SUM", "MAX"};

struct EltwiseAttrs final : AttrsOf<EltwiseAttrs> {
  enum Operation { prod, sum, max };  // Caffe's EltwiseOp order
  int operation = sum;
  std::vector<float> coeff;  // SUM: one per bottom; empty: all 1
  // PROD's gradient as the product of the other inputs, not y / x (which fails at x == 0).
  bool stable_prod_grad = true;
  void visit(AttrVisitor& v) override {
    v.field("operation", operation, kEltwiseOps);
    v.field("coeff", coeff);
    v.field("stable_prod_grad", stable_prod_grad);
  }
};
void eltwise_from_caffe(const proto::LayerParameter& l, EltwiseAttrs& a, const std::string&) {
  const proto::EltwiseParameter& p = l.eltwise_param();
  a.operation = static_cast<int>(p.operation());
  a.coeff.assign(p.coeff().begin(), p.coeff().end());
  a.stable_prod_grad = p.stable_prod_grad();
}
void eltwise_to_caffe(const EltwiseAttrs& a, proto::LayerParameter& l) {
  proto::EltwiseParameter* p = l.mutable_eltwise_param();
  p->set_operation(static_cast<proto::EltwiseParameter::EltwiseOp>(a.operation));
  p->clear_coeff();
  for (float k : a.coeff) p->add_coeff(k);
  p->set_stable_prod_grad(a.stable_prod_grad);
}
BKS_REGISTER_ATTRS("Eltwise", EltwiseAttrs, eltwise_from_caffe, eltwise_to_caffe);

// One coefficient per bottom (1 unless eltwise_param.coeff gives them), checked.
std::vector<float> eltwise_coeffs(const OpContext& c) {
  const EltwiseAttrs& a = c.node.attrs.as<EltwiseAttrs>();
  size_t n_in = c.node.inputs.size();
  if (!a.coeff.empty() && a.coeff.size() != n_in)
    c.fail("eltwise_param.coeff needs one value per bottom ({} bottoms, {} coeffs)", n_in, a.coeff.size());
  if (!a.coeff.empty() && a.operation != EltwiseAttrs::sum) c.fail("coeff applies to SUM only");
  return a.coeff.empty() ? std::vector<float>(n_in, 1.f) : a.coeff;
}

class EltwiseDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_inputs(const OpContext&) const override { return -1; }
  void check(const OpContext& c) const override { eltwise_coeffs(c); }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    for (size_t k = 1; k < in.size(); ++k)
      if (in[k] != in[0])
        c.fail("bottom {} shape {} differs from bottom 0 shape {}", k, shape_str(in[k]), shape_str(in[0]));
    out[0] = in[0];
  }
  OpFacts facts(const OpContext& c, const std::vector<Shape>&) const override {
    const EltwiseAttrs& a = c.node.attrs.as<EltwiseAttrs>();
    bool prod = a.operation == EltwiseAttrs::prod;
    OpFacts f;
    f.backward_reads_input = prod;
    f.backward_reads_output = prod && !a.stable_prod_grad;
    return f;
  }
  OpTraits traits(const Node& n) const override {
    const EltwiseAttrs& a = n.attrs.as<EltwiseAttrs>();
    OpTraits t;
    t.residual_sum = a.operation == EltwiseAttrs::sum && n.inputs.size() == 2 &&
                     std::all_of(a.coeff.begin(), a.coeff.end(), [](float k) { return k == 1.f; });
    return t;
  }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
};

class EltwiseKernel final : public Kernel {
 public:
  explicit EltwiseKernel(const OpInit& i)
      : Kernel(i),
        op_(i.node.attrs.as<EltwiseAttrs>().operation),
        stable_prod_grad_(i.node.attrs.as<EltwiseAttrs>().stable_prod_grad),
        coeff_(eltwise_coeffs(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    if (op_ == EltwiseAttrs::max) argmax_.reshape(in[0]);
  }

  void forward(OpCall& c) override {
    float* y = c.out[0]->f32();
    int64_t n = c.out[0]->numel();
    switch (op_) {
      case EltwiseAttrs::sum: {
        const float* a = c.in[0]->f32();
        float c0 = coeff_[0];
        for (int64_t i = 0; i < n; ++i) y[i] = c0 * a[i];
        for (size_t k = 1; k < c.in.size(); ++k) {
          const float* b = c.in[k]->f32();
          float ck = coeff_[k];
          parallel_ranges(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
            for (int64_t i = lo; i < hi; ++i) y[i] += ck * b[i];
          });
        }
        break;
      }
      case EltwiseAttrs::prod: {
        c.out[0]->copy_from(*c.in[0]);
        for (size_t k = 1; k < c.in.size(); ++k) {
          const float* b = c.in[k]->f32();
          for (int64_t i = 0; i < n; ++i) y[i] *= b[i];
        }
        break;
      }
      case EltwiseAttrs::max: {
        int* arg = argmax_.data<int>();
        for (int64_t i = 0; i < n; ++i) {
          float best = -FLT_MAX;
          int who = 0;
          for (size_t k = 0; k < c.in.size(); ++k) {
            float v = c.in[k]->f32()[i];
            if (v > best) {
              best = v;
              who = static_cast<int>(k);
            }
          }
          y[i] = best;
          arg[i] = who;
        }
        break;
      }
    }
  }

  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    int64_t n = c.out[0]->numel();
    for (size_t k = 0; k < c.in.size(); ++k) {
      if (!c.in_grad[k]) continue;
      float* dx = c.in_grad[k]->f32();
      switch (op_) {
        case EltwiseAttrs::sum: {
          float ck = coeff_[k];
          parallel_ranges(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
            for (int64_t i = lo; i < hi; ++i) dx[i] = ck * dy[i];
          });
          break;
        }
        case EltwiseAttrs::prod:
          if (stable_prod_grad_) {
            for (int64_t i = 0; i < n; ++i) {
              float prod = 1.f;
              for (size_t j = 0; j < c.in.size(); ++j)
                if (j != k) prod *= c.in[j]->f32()[i];
              dx[i] = dy[i] * prod;
            }
          } else {
            const float* y = c.out[0]->f32();
            const float* x = c.in[k]->f32();
            for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] / x[i];
          }
          break;
        case EltwiseAttrs::max: {
          const int* arg = argmax_.data<int>();
          for (int64_t i = 0; i < n; ++i) dx[i] = arg[i] == static_cast<int>(k) ? dy[i] : 0.f;
          break;
        }
      }
    }
  }

 private:
  int op_;  // EltwiseAttrs::Operation
  bool stable_prod_grad_;
  std::vector<float> coeff_;
  Tensor argmax_{Shape{0}, DType::s32};
};

}  // namespace

BKS_REGISTER_OP_DEF("Eltwise", EltwiseDef);
BKS_REGISTER_KERNEL("Eltwise", ::bks::DeviceKind::cpu, EltwiseKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
