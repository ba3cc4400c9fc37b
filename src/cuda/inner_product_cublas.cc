// InnerProduct on the GPU through cuBLAS: y = x W^T + b with W stored (outputs, inputs), or
// (inputs, outputs) with transpose: true. cuBLAS is column-major, so each row-major product
// is written as the column-major product of the transposes.
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/elementwise.h"
#include "cuda/gpu_kernel.h"
#include "ops/inner_product_attrs.h"

namespace bks::cuda {

namespace {

int blas_dim(int64_t v, const Kernel& k) {
  if (v > INT32_MAX) throw InputError(k.where() + ": dimension " + std::to_string(v) + " is beyond what cuBLAS takes");
  return static_cast<int>(v);
}

class InnerProductCublas final : public GpuKernel {
 public:
  explicit InnerProductCublas(const OpInit& i) : GpuKernel(i), a_(i.node.attrs.as<InnerProductAttrs>()) {}

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    int axis = canonical_axis(a_.axis, static_cast<int>(in[0].size()), "axis");
    m_ = blas_dim(shape_count(in[0], 0, axis), *this);
    k_ = blas_dim(shape_count(in[0], axis, static_cast<int>(in[0].size())), *this);
    n_ = blas_dim(a_.num_output, *this);
    if (a_.bias_term && (!ones_.defined() || ones_.numel() < m_)) {
      ones_ = Tensor({m_}, DType::f32, gpu_.device());
      fill(ones_.f32(), m_, 1.f, gpu_.stream());
    }
  }

  void forward(OpCall& c) override {
    const float one = 1.f, zero = 0.f;
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    float* y = c.out[0]->f32();
    // y^T (n x m) = W (n x k) x^T (k x m).
    if (a_.transpose)
      BKS_CUBLAS_CALL(
          cublasSgemm(gpu_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n_, m_, k_, &one, w, n_, x, k_, &zero, y, n_));
    else
      BKS_CUBLAS_CALL(
          cublasSgemm(gpu_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n_, m_, k_, &one, w, k_, x, k_, &zero, y, n_));
    // y^T += b 1^T.
    if (a_.bias_term)
      BKS_CUBLAS_CALL(cublasSgemm(gpu_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n_, m_, 1, &one, c.params[1]->f32(), n_,
                                  ones_.f32(), 1, &one, y, n_));
  }

  void backward(OpCall& c) override {
    const float one = 1.f, zero = 0.f;
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) {
      float* dw = c.param_grad[0]->f32();
      if (a_.transpose)  // dW stored (k x n) row-major = x^T dy: column-major (n x k) = dy^T x.
        BKS_CUBLAS_CALL(
            cublasSgemm(gpu_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, n_, k_, m_, &one, dy, n_, x, k_, &zero, dw, n_));
      else  // dW (n x k, row-major) = dy^T x: column-major (k x n) = x^T dy.
        BKS_CUBLAS_CALL(
            cublasSgemm(gpu_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, k_, n_, m_, &one, x, k_, dy, n_, &zero, dw, k_));
    }
    if (a_.bias_term && c.param_grad.size() > 1 && c.param_grad[1])  // db = dy^T 1
      BKS_CUBLAS_CALL(cublasSgemv(gpu_.cublas(), CUBLAS_OP_N, n_, m_, &one, dy, n_, ones_.f32(), 1, &zero,
                                  c.param_grad[1]->f32(), 1));
    if (c.in_grad[0]) {  // dx (m x k) = dy W: column-major dx^T (k x m) = W^T dy^T.
      const float* w = c.params[0]->f32();
      float* dx = c.in_grad[0]->f32();
      if (a_.transpose)
        BKS_CUBLAS_CALL(
            cublasSgemm(gpu_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, k_, m_, n_, &one, w, n_, dy, n_, &zero, dx, k_));
      else
        BKS_CUBLAS_CALL(
            cublasSgemm(gpu_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, k_, m_, n_, &one, w, k_, dy, n_, &zero, dx, k_));
    }
  }

  std::string kernel_name() const override { return "cuBLAS"; }

 private:
  const InnerProductAttrs& a_;
  int m_ = 0, k_ = 0, n_ = 0;
  Tensor ones_;  // m ones: the bias as a rank-1 product
};

bool supports(const OpInit& i) { return i.node.inputs.size() == 1 && i.node.outputs.size() == 1; }

}  // namespace

BKS_REGISTER_KERNEL("InnerProduct", DeviceKind::cuda, InnerProductCublas, "cuBLAS", 10, supports);

}  // namespace bks::cuda
