// MAX and AVE pooling on the GPU through cuDNN. cuDNN rounds the output size down; Caffe
// rounds it up by default, and its AVE divisor leaves out the part of a window past the
// padded input. Where the window sweeps the padded input exactly (Caffe's size equals the
// rounded-down one) the two agree, padding counted in every divisor: those nodes run here.
#include "cuda/cuda_check.h"
#include "cuda/cudnn_desc.h"
#include "cuda/gpu_kernel.h"
#include "ops/pooling_attrs.h"

namespace bks::cuda {

namespace {

int64_t floor_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

class PoolingCudnn final : public GpuKernel {
 public:
  explicit PoolingCudnn(const OpInit& i) : GpuKernel(i), w_(pool_window(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    if (w_.global) return;
    if (in[0].size() != 4) fail("pooling on the GPU takes 4-d inputs, not {}", shape_str(in[0]));
    if (out[0][2] != floor_size(in[0][2], w_.kh, w_.sh, w_.ph) ||
        out[0][3] != floor_size(in[0][3], w_.kw, w_.sw, w_.pw))
      fail(
          "pooling {} to {}: on the GPU the window must sweep the padded input exactly (Caffe's rounded-up size "
          "equal to the rounded-down one); this one overhangs its edge, which cuDNN does not do",
          shape_str(in[0]), shape_str(out[0]));
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    x_.set(in[0]);
    y_.set(out[0]);
    int64_t kh = w_.global ? in[0][2] : w_.kh, kw = w_.global ? in[0][3] : w_.kw;
    BKS_CUDNN_CALL(cudnnSetPooling2dDescriptor(
        pool_, w_.max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_PROPAGATE_NAN, cudnn_dim(kh), cudnn_dim(kw), cudnn_dim(w_.global ? 0 : w_.ph),
        cudnn_dim(w_.global ? 0 : w_.pw), cudnn_dim(w_.global ? 1 : w_.sh), cudnn_dim(w_.global ? 1 : w_.sw)));
  }
  void forward(OpCall& c) override {
    const float one = 1.f, zero = 0.f;
    BKS_CUDNN_CALL(cudnnPoolingForward(gpu_.cudnn(), pool_, &one, x_, c.in[0]->f32(), &zero, y_, c.out[0]->f32()));
    if (phase() == proto::TRAIN && w_.max) {
      // cuDNN's MAX backward finds the winners again from x and y, but the op's definition
      // lets the planner reuse both before backward (the CPU kernels keep the winners'
      // positions instead): keep copies. (Our own argmax kernel would save the copies.)
      keep(x_keep_, *c.in[0]);
      keep(y_keep_, *c.out[0]);
    }
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float one = 1.f, zero = 0.f;
    // AVE reads neither x nor y: any buffer of the right size serves.
    const float* x = w_.max ? x_keep_.f32() : c.in_grad[0]->f32();
    const float* y = w_.max ? y_keep_.f32() : c.out_grad[0]->f32();
    BKS_CUDNN_CALL(cudnnPoolingBackward(gpu_.cudnn(), pool_, &one, y_, y, y_, c.out_grad[0]->f32(), x_, x, &zero, x_,
                                        c.in_grad[0]->f32()));
  }
  std::string kernel_name() const override { return "cuDNN"; }

 private:
  void keep(Tensor& copy, const Tensor& t) {
    if (!copy.defined() || copy.numel() != t.numel()) copy = Tensor(t.shape(), DType::f32, gpu_.device());
    BKS_CUDA_CALL(cudaMemcpyAsync(copy.raw(), t.raw(), t.bytes(), cudaMemcpyDeviceToDevice, gpu_.stream()));
  }
  PoolWindow w_;
  TensorDesc x_, y_;
  PoolDesc pool_;
  Tensor x_keep_, y_keep_;  // MAX in training: the forward's input and output
};

// MAX or AVE with one output (no MAX mask).
bool supports(const OpInit& i) {
  const PoolingAttrs& a = i.node.attrs.as<PoolingAttrs>();
  return i.node.inputs.size() == 1 && i.node.outputs.size() == 1 && a.method != PoolingAttrs::stochastic;
}

}  // namespace

BKS_REGISTER_KERNEL("Pooling", DeviceKind::cuda, PoolingCudnn, "cuDNN", 10, supports);

}  // namespace bks::cuda
