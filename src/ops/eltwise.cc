// Eltwise: SUM (with per-input coefficients), PROD and MAX of same-shaped inputs.
#include <algorithm>
#include <cfloat>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

// One coefficient per bottom (1 unless eltwise_param.coeff gives them), checked.
std::vector<float> eltwise_coeffs(const OpContext& c) {
  const auto& p = c.node.param.eltwise_param();
  size_t n_in = c.node.inputs.size();
  if (p.coeff_size() && p.coeff_size() != static_cast<int>(n_in))
    c.fail("eltwise_param.coeff needs one value per bottom ({} bottoms, {} coeffs)", n_in, p.coeff_size());
  if (p.coeff_size() && p.operation() != proto::EltwiseParameter::SUM) c.fail("coeff applies to SUM only");
  std::vector<float> coeff;
  for (size_t k = 0; k < n_in; ++k) coeff.push_back(p.coeff_size() ? p.coeff(static_cast<int>(k)) : 1.f);
  return coeff;
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
    const auto& p = c.node.param.eltwise_param();
    bool prod = p.operation() == proto::EltwiseParameter::PROD;
    OpFacts f;
    f.backward_reads_input = prod;
    f.backward_reads_output = prod && !p.stable_prod_grad();
    return f;
  }
  OpTraits traits(const Node& n) const override {
    const auto& p = n.param.eltwise_param();
    OpTraits t;
    t.residual_sum = p.operation() == proto::EltwiseParameter::SUM && n.inputs.size() == 2 &&
                     std::all_of(p.coeff().begin(), p.coeff().end(), [](float k) { return k == 1.f; });
    return t;
  }
};

class EltwiseKernel final : public Kernel {
 public:
  explicit EltwiseKernel(const OpInit& i)
      : Kernel(i), p_(i.node.param.eltwise_param()), coeff_(eltwise_coeffs(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    if (p_.operation() == proto::EltwiseParameter::MAX) argmax_.reshape(in[0]);
  }

  void forward(OpCall& c) override {
    float* y = c.out[0]->f32();
    int64_t n = c.out[0]->numel();
    switch (p_.operation()) {
      case proto::EltwiseParameter::SUM: {
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
      case proto::EltwiseParameter::PROD: {
        c.out[0]->copy_from(*c.in[0]);
        for (size_t k = 1; k < c.in.size(); ++k) {
          const float* b = c.in[k]->f32();
          for (int64_t i = 0; i < n; ++i) y[i] *= b[i];
        }
        break;
      }
      case proto::EltwiseParameter::MAX: {
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
      switch (p_.operation()) {
        case proto::EltwiseParameter::SUM: {
          float ck = coeff_[k];
          parallel_ranges(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
            for (int64_t i = lo; i < hi; ++i) dx[i] = ck * dy[i];
          });
          break;
        }
        case proto::EltwiseParameter::PROD:
          if (p_.stable_prod_grad()) {
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
        case proto::EltwiseParameter::MAX: {
          const int* arg = argmax_.data<int>();
          for (int64_t i = 0; i < n; ++i) dx[i] = arg[i] == static_cast<int>(k) ? dy[i] : 0.f;
          break;
        }
      }
    }
  }

 private:
  proto::EltwiseParameter p_;
  std::vector<float> coeff_;
  Tensor argmax_{Shape{0}, DType::s32};
};

}  // namespace

BKS_REGISTER_OP_DEF("Eltwise", EltwiseDef);
BKS_REGISTER_KERNEL("Eltwise", ::bks::DeviceKind::cpu, EltwiseKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
