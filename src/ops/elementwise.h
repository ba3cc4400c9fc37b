// Base for ops that map each element independently: y = f(x), dx = dy * f'(x, y).
// The derived class supplies f and grad as inline members; the loops here are written so
// the compiler vectorises them. Ops whose gradient needs only y may run in place.
#pragma once

#include "ops/op.h"

namespace bks {

template <class Derived>
class ElementwiseOp : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 1; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override { out[0] = in[0]; }
  // Derived sets needs_x_ when grad() reads x (then in-place use is refused).
  bool allows_inplace() const override { return !needs_x_; }
  bool backward_reads_input() const override { return needs_x_; }
  bool backward_reads_output() const override { return !needs_x_; }
  // Ops with f(0) == 0 may run on blocked layouts: their padding stays zero.
  LayoutRule layout_rule() const override { return zero_preserving_ ? LayoutRule::any_in_same_out : LayoutRule::plain_only; }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const Derived& d = static_cast<const Derived&>(*this);
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) y[i] = d.f(x[i]);
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* y = c.out[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const Derived& d = static_cast<const Derived&>(*this);
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * d.grad(x[i], y[i]);
  }

 protected:
  bool needs_x_ = true;
  bool zero_preserving_ = false;
};

}  // namespace bks
