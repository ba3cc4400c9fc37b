// Ops that map each element independently: y = f(x), dx = dy * f'(x, y).
//
// Each such op is a small function object `Fn` with
//   static Fn from(const OpContext& c)   its attributes (c.node.attrs), checked (errors name the field);
//   Flow flow() const                    what backward reads, whether f(0) == 0;
//   float f(float x) const, float grad(float x, float y) const   (inline).
// ElementwiseDef<Fn> is its definition and ElementwiseKernel<Fn> its loops (which are also
// its reference: readable, and the compiler vectorises them, since the loops copy the
// function object to a local so its parameters are loop invariants). Ops whose gradient
// needs only y may run in place; ops with f(0) == 0 may run on blocked layouts, whose
// padding stays zero.
#pragma once

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {

struct ElementwiseFlow {
  bool needs_x = true;   // grad() reads x (then in-place use is refused)
  bool reads_y = false;  // grad() reads y
  bool zero_preserving = false;
};

template <class Fn>
class ElementwiseDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { Fn::from(c); }
  void infer(const OpContext&, const std::vector<Shape>& in, std::vector<Shape>& out) const override { out[0] = in[0]; }
  OpFacts facts(const OpContext& c, const std::vector<Shape>&) const override {
    ElementwiseFlow fl = Fn::from(c).flow();
    OpFacts f;
    f.allows_inplace = !fl.needs_x;
    f.backward_reads_input = fl.needs_x;
    f.backward_reads_output = fl.reads_y;
    return f;
  }
  OpTraits traits(const Node& n) const override {
    OpTraits t;
    t.elementwise = true;
    Fn::add_traits(n, t);
    return t;
  }
  // An Fn with `static bool affine(const Node&, double& a, double& b)` (affine Power) is the
  // same affine map on every channel.
  bool channel_affine(const Node& n, const std::vector<const Tensor*>&, int64_t channels, std::vector<double>& a,
                      std::vector<double>& b) const override {
    if constexpr (requires(double x) { Fn::affine(n, x, x); }) {
      double sa = 1, sb = 0;
      if (!Fn::affine(n, sa, sb)) return false;
      a.assign(channels, sa);
      b.assign(channels, sb);
      return true;
    }
    return false;
  }
  // An Fn with `static float slope_of(const Node&)` (ReLU) fuses into a producer.
  float activation_slope(const Node& n) const override {
    if constexpr (requires { Fn::slope_of(n); }) return Fn::slope_of(n);
    return 0.f;
  }
  // And one with `static float max_of(const Node&)` (ReLU6, Clip from 0) with that bound.
  float activation_max(const Node& n) const override {
    if constexpr (requires { Fn::max_of(n); }) return Fn::max_of(n);
    return std::numeric_limits<float>::infinity();
  }
};

template <class Fn>
class ElementwiseKernel final : public Kernel {
 public:
  explicit ElementwiseKernel(const OpInit& i) : Kernel(i), fn_(Fn::from(context())), flow_(fn_.flow()) {}
  LayoutRule layout_rule() const override {
    return flow_.zero_preserving ? LayoutRule::any_in_same_out : LayoutRule::plain_only;
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const Fn k = fn_;
    parallel_ranges(n, [=](int64_t b, int64_t e) {
      const Fn fn = k;  // a local whose address never escapes: its fields stay in registers
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] = fn.f(x[i]);
    });
  }

  // Backward passes only what grad() reads: a buffer nobody declared reading may already
  // hold other data when backward runs.
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = flow_.needs_x ? c.in[0]->f32() : c.out[0]->f32();
    const float* y = flow_.reads_y ? c.out[0]->f32() : x;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    const Fn k = fn_;
    parallel_ranges(n, [=](int64_t b, int64_t e) {
      const Fn fn = k;
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * fn.grad(x[i], y[i]);
    });
  }

 private:
  Fn fn_;
  ElementwiseFlow flow_;
};

#define BKS_REGISTER_ELEMENTWISE_IMPL2(type, fn, line)                                                                \
  static ::bks::OpDefRegistrar bks_def_registrar_##line(type, std::make_unique<::bks::ElementwiseDef<fn>>());         \
  BKS_REGISTER_KERNEL(type, ::bks::DeviceKind::cpu, ::bks::ElementwiseKernel<fn>, "loops", ::bks::kReferencePriority, \
                      nullptr)
#define BKS_REGISTER_ELEMENTWISE_IMPL(type, fn, line) BKS_REGISTER_ELEMENTWISE_IMPL2(type, fn, line)
// Registers an elementwise op's definition and its loops (its CPU and reference kernel).
#define BKS_REGISTER_ELEMENTWISE(type, fn) BKS_REGISTER_ELEMENTWISE_IMPL(type, fn, __LINE__)

}  // namespace bks
