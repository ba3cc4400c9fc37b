// Softmax on the GPU through cuDNN: the tensor viewed as (outer, channels, inner, 1) and
// normalised over channels, which is Caffe's softmax over `axis`.
#include "cuda/attr_value.h"
#include "cuda/cuda_check.h"
#include "cuda/cudnn_desc.h"
#include "cuda/gpu_kernel.h"

namespace bks::cuda {

namespace {

class SoftmaxCudnn final : public GpuKernel {
 public:
  explicit SoftmaxCudnn(const OpInit& i) : GpuKernel(i), axis_(attr_int(i.node, "axis", 1)) {}

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    int nd = static_cast<int>(in[0].size());
    int a = canonical_axis(axis_, nd, "axis");
    x_.set(shape_count(in[0], 0, a), in[0][a], shape_count(in[0], a + 1, nd), 1);
  }
  void forward(OpCall& c) override {
    const float one = 1.f, zero = 0.f;
    BKS_CUDNN_CALL(cudnnSoftmaxForward(gpu_.cudnn(), CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, x_,
                                       c.in[0]->f32(), &zero, x_, c.out[0]->f32()));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float one = 1.f, zero = 0.f;
    BKS_CUDNN_CALL(cudnnSoftmaxBackward(gpu_.cudnn(), CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, x_,
                                        c.out[0]->f32(), x_, c.out_grad[0]->f32(), &zero, x_, c.in_grad[0]->f32()));
  }
  std::string kernel_name() const override { return "cuDNN"; }

 private:
  int64_t axis_;
  TensorDesc x_;
};

}  // namespace

BKS_REGISTER_KERNEL("Softmax", DeviceKind::cuda, SoftmaxCudnn, "cuDNN", 10, nullptr);

}  // namespace bks::cuda
