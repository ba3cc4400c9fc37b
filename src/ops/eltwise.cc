// Eltwise: SUM (with per-input coefficients), PROD and MAX of same-shaped inputs.
#include <cfloat>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

class EltwiseOp final : public Op {
 public:
  explicit EltwiseOp(const OpInit& i) : Op(i), p_(i.node.param.eltwise_param()), n_in_(i.node.inputs.size()) {
    if (p_.coeff_size() && p_.coeff_size() != static_cast<int>(n_in_))
      fail("eltwise_param.coeff needs one value per bottom ({} bottoms, {} coeffs)", n_in_, p_.coeff_size());
    if (p_.coeff_size() && p_.operation() != proto::EltwiseParameter::SUM) fail("coeff applies to SUM only");
    for (size_t k = 0; k < n_in_; ++k) coeff_.push_back(p_.coeff_size() ? p_.coeff(static_cast<int>(k)) : 1.f);
  }
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return -1; }
  bool backward_reads_input() const override { return p_.operation() == proto::EltwiseParameter::PROD; }
  bool backward_reads_output() const override { return p_.operation() == proto::EltwiseParameter::PROD && !p_.stable_prod_grad(); }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    for (size_t k = 1; k < in.size(); ++k)
      if (in[k] != in[0]) fail("bottom {} shape {} differs from bottom 0 shape {}", k, shape_str(in[k]), shape_str(in[0]));
    out[0] = in[0];
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
  size_t n_in_;
  std::vector<float> coeff_;
  Tensor argmax_{Shape{0}, DType::s32};
};

}  // namespace

BKS_REGISTER_OP("Eltwise", EltwiseOp);

}  // namespace bks
