// Runs one op in isolation, as Caffe's layer tests do: random inputs, forward, backward,
// and a finite-difference check of every input and parameter gradient.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "input_error.h"
#include "ops/op.h"

namespace bks::test {

// The run seed kernels see (OpInit::seed): ops that draw random numbers (Dropout) derive
// their streams from it.
constexpr uint64_t kHarnessSeed = 42;

class OpHarness {
 public:
  // `layer` is a LayerParameter in text format (without the enclosing "layer { }").
  // `before_prepare` may set layouts (Op::set_layouts) before kernels are built.
  // `kernel` names a CPU kernel registry entry ("reference", "oneDNN", "loops") to run
  // instead of the preferred one; InputError when the type has none by that name or it
  // does not support the layer. Parameters, inputs and output gradients do not depend on
  // the kernel: harnesses built from the same arguments start from the same values.
  OpHarness(const std::string& layer, const std::vector<Shape>& in_shapes, Phase phase = proto::TRAIN,
            int num_outputs = 1, const std::function<void(Kernel&)>& before_prepare = {},
            const std::string& kernel = "");
  ~OpHarness();

  void forward();
  // The batch the next forward() and backward() are (OpCall::step; 0 until set).
  void set_step(int64_t step);
  // Backward with out_grad as set (defaults to random weights).
  void backward();
  // Fills inputs with N(0, 1) (or uniform in [lo, hi)).
  void randomize_inputs(float lo = -1.f, float hi = 1.f, uint64_t seed = 7);
  // Compares analytic and numeric gradients of L = sum(out_grad .* out) w.r.t. the inputs in
  // `inputs` (all that can propagate when empty; {-1} for none) and all learnable params.
  // L, the central differences and the comparison are computed in double.
  void check_gradients(float step = 1e-3f, float tol = 1e-2f, std::vector<int> inputs = {});

  Kernel& op() { return *op_; }
  // The node the layer became (what a kernel on another backend is built for).
  const Node& node() const { return *node_; }
  const OpFacts& facts() const { return facts_; }
  bool can_propagate_to(int i) const {
    return i >= static_cast<int>(facts_.can_propagate_to.size()) || facts_.can_propagate_to[i];
  }
  std::vector<Tensor> in, out, params, in_grad, out_grad, param_grad;

 private:
  double objective();
  std::unique_ptr<Node> node_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Kernel> op_;
  OpFacts facts_;
  OpCall call_;
};

// Builds an index-accessible naive view for references: x(n, c, h, w) of a 4-d tensor.
inline float at4(const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  return t.f32()[((n * t.dim(1) + c) * t.dim(2) + h) * t.dim(3) + w];
}

void expect_close(const Tensor& a, const Tensor& b, float tol, const std::string& what);

}  // namespace bks::test
