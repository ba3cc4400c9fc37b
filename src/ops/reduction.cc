// Reduction (SUM, ASUM, SUMSQ, MEAN over the axes from `axis` on, times coeff) and ArgMax.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/op.h"

namespace bks {
namespace {

class ReductionOp final : public Op {
 public:
  explicit ReductionOp(const OpInit& i) : Op(i), p_(i.node.param.reduction_param()) {}
  int min_inputs() const override { return 1; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    int axis = p_.axis() == nd ? nd : canonical_axis(p_.axis(), nd, "reduction_param.axis");
    outer_ = shape_count(in[0], 0, axis);
    dim_ = shape_count(in[0], axis, nd);
    out[0] = Shape(in[0].begin(), in[0].begin() + axis);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    for (int64_t o = 0; o < outer_; ++o) {
      double s = 0;
      const float* p = x + o * dim_;
      for (int64_t i = 0; i < dim_; ++i) {
        switch (p_.operation()) {
          case proto::ReductionParameter::ASUM: s += std::fabs(p[i]); break;
          case proto::ReductionParameter::SUMSQ: s += static_cast<double>(p[i]) * p[i]; break;
          default: s += p[i];
        }
      }
      if (p_.operation() == proto::ReductionParameter::MEAN) s /= static_cast<double>(dim_);
      y[o] = static_cast<float>(s * p_.coeff());
    }
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for (int64_t o = 0; o < outer_; ++o) {
      float g = dy[o] * p_.coeff();
      if (p_.operation() == proto::ReductionParameter::MEAN) g /= static_cast<float>(dim_);
      for (int64_t i = 0; i < dim_; ++i) {
        float xi = x[o * dim_ + i];
        switch (p_.operation()) {
          case proto::ReductionParameter::ASUM: dx[o * dim_ + i] = g * static_cast<float>((xi > 0) - (xi < 0)); break;
          case proto::ReductionParameter::SUMSQ: dx[o * dim_ + i] = 2.f * g * xi; break;
          default: dx[o * dim_ + i] = g;
        }
      }
    }
  }

 private:
  proto::ReductionParameter p_;
  int64_t outer_ = 1, dim_ = 1;
};

class ArgMaxOp final : public Op {
 public:
  explicit ArgMaxOp(const OpInit& i) : Op(i), p_(i.node.param.argmax_param()) {
    if (p_.top_k() < 1) fail("argmax_param.top_k must be at least 1");
  }
  int min_inputs() const override { return 1; }
  bool has_backward() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    int64_t k = p_.top_k();
    if (p_.has_axis()) {
      int axis = canonical_axis(p_.axis(), nd, "argmax_param.axis");
      outer_ = shape_count(in[0], 0, axis);
      dim_ = in[0][axis];
      inner_ = shape_count(in[0], axis + 1, nd);
      out[0] = in[0];
      out[0][axis] = k;
      with_val_ = false;
    } else {
      outer_ = in[0][0];
      dim_ = shape_count(in[0], 1, nd);
      inner_ = 1;
      out[0] = {outer_, p_.out_max_val() ? 2 : 1, k};
      with_val_ = p_.out_max_val();
    }
    if (k > dim_) fail("top_k {} exceeds the {} values it ranks", k, dim_);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t k = p_.top_k();
    std::vector<int64_t> idx(static_cast<size_t>(dim_));
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        auto val = [&](int64_t d) { return x[(o * dim_ + d) * inner_ + i]; };
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int64_t a, int64_t b) { return val(a) > val(b) || (val(a) == val(b) && a < b); });
        for (int64_t j = 0; j < k; ++j) {
          if (p_.has_axis()) {
            y[(o * k + j) * inner_ + i] = p_.out_max_val() ? val(idx[j]) : static_cast<float>(idx[j]);
          } else {
            y[o * (with_val_ ? 2 : 1) * k + j] = static_cast<float>(idx[j]);
            if (with_val_) y[o * 2 * k + k + j] = val(idx[j]);
          }
        }
      }
  }

 private:
  proto::ArgMaxParameter p_;
  int64_t outer_ = 1, dim_ = 1, inner_ = 1;
  bool with_val_ = false;
};

}  // namespace

BKS_REGISTER_OP("Reduction", ReductionOp);
BKS_REGISTER_OP("ArgMax", ArgMaxOp);

}  // namespace bks
