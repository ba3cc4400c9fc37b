// ReLU, Sigmoid and TanH on the GPU (our elementwise kernels; in place allowed). Backward
// reads what the op's definition says it keeps: ReLU with a non-negative slope and the
// other two read the output, ReLU with a negative slope reads the input.
#include "cuda/attr_value.h"
#include "cuda/elementwise.h"
#include "cuda/gpu_kernel.h"

namespace bks::cuda {

namespace {

class ReLUKernel final : public GpuKernel {
 public:
  explicit ReLUKernel(const OpInit& i) : GpuKernel(i), slope_(attr_float(i.node, "negative_slope", 0.f)) {}
  void forward(OpCall& c) override {
    relu_forward(c.in[0]->f32(), c.out[0]->f32(), c.in[0]->numel(), slope_, gpu_.stream());
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const Tensor* sign = slope_ < 0.f ? c.in[0] : c.out[0];
    relu_backward(sign->f32(), c.out_grad[0]->f32(), c.in_grad[0]->f32(), c.in_grad[0]->numel(), slope_, gpu_.stream());
  }

 private:
  float slope_;
};

class SigmoidKernel final : public GpuKernel {
 public:
  using GpuKernel::GpuKernel;
  void forward(OpCall& c) override {
    sigmoid_forward(c.in[0]->f32(), c.out[0]->f32(), c.in[0]->numel(), gpu_.stream());
  }
  void backward(OpCall& c) override {
    if (c.in_grad[0])
      sigmoid_backward(c.out[0]->f32(), c.out_grad[0]->f32(), c.in_grad[0]->f32(), c.in_grad[0]->numel(),
                       gpu_.stream());
  }
};

class TanHKernel final : public GpuKernel {
 public:
  using GpuKernel::GpuKernel;
  void forward(OpCall& c) override { tanh_forward(c.in[0]->f32(), c.out[0]->f32(), c.in[0]->numel(), gpu_.stream()); }
  void backward(OpCall& c) override {
    if (c.in_grad[0])
      tanh_backward(c.out[0]->f32(), c.out_grad[0]->f32(), c.in_grad[0]->f32(), c.in_grad[0]->numel(), gpu_.stream());
  }
};

}  // namespace

BKS_REGISTER_KERNEL("ReLU", DeviceKind::cuda, ReLUKernel, "CUDA", 10, nullptr);
BKS_REGISTER_KERNEL("Sigmoid", DeviceKind::cuda, SigmoidKernel, "CUDA", 10, nullptr);
BKS_REGISTER_KERNEL("TanH", DeviceKind::cuda, TanHKernel, "CUDA", 10, nullptr);

}  // namespace bks::cuda
