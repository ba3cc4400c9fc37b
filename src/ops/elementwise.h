// Base for ops that map each element independently: y = f(x), dx = dy * f'(x, y).
// The derived class returns, from kernel(), a small value with inline f(x) and grad(x, y);
// the loops copy it to a local so its parameters are loop invariants and the compiler
// vectorises them. Ops whose gradient needs only y may run in place.
#pragma once

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {

template <class Derived>
class ElementwiseOp : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 1; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override { out[0] = in[0]; }
  // Derived sets needs_x_ when grad() reads x (then in-place use is refused) and reads_y_
  // when it reads y. Backward passes only what grad() reads: a buffer nobody declared
  // reading may already hold other data when backward runs.
  bool allows_inplace() const override { return !needs_x_; }
  bool backward_reads_input() const override { return needs_x_; }
  bool backward_reads_output() const override { return reads_y_; }
  // Ops with f(0) == 0 may run on blocked layouts: their padding stays zero.
  LayoutRule layout_rule() const override { return zero_preserving_ ? LayoutRule::any_in_same_out : LayoutRule::plain_only; }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const auto k = static_cast<const Derived&>(*this).kernel();
    parallel_ranges(n, [=](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] = k.f(x[i]);
    });
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = needs_x_ ? c.in[0]->f32() : c.out[0]->f32();
    const float* y = reads_y_ ? c.out[0]->f32() : x;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const auto k = static_cast<const Derived&>(*this).kernel();
    parallel_ranges(n, [=](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * k.grad(x[i], y[i]);
    });
  }

 protected:
  bool needs_x_ = true;
  bool reads_y_ = false;
  bool zero_preserving_ = false;
};

}  // namespace bks
