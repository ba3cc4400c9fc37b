// INT8 inference GEMM for InnerProduct: C[m,n] = A[m,k] W[n,k]^T (+ bias, ReLU), A quantized
// to s8 with the calibrated threshold, W per output column (scale 127 / max|W[j,:]|),
// accumulated in s32 by oneDNN's int8 matmul (VNNI / AMX) and written as f32 through
// per-column output scales. Built at the first run, when the weights are known.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

namespace bks {

class Int8MatMul {
 public:
  // weights_kn: W stored [k, n] (InnerProduct's transpose) instead of [n, k].
  Int8MatMul(const dnnl::engine& eng, int64_t m, int64_t n, int64_t k, bool weights_kn, bool bias, bool relu, float slope,
             float threshold);
  void run(dnnl::stream& s, const float* a, const float* w, const float* bias, float* c);
  std::string name() const { return name_; }

 private:
  void build(dnnl::stream& s, const float* w, const float* bias);

  dnnl::engine eng_;
  int64_t m_, n_, k_;
  bool kn_, bias_, relu_, built_ = false;
  float slope_, scale_;
  dnnl::matmul mm_;
  dnnl::memory a_f32_, a_q_, w_q_, bias_q_, c_;
  std::unique_ptr<dnnl::reorder> quantize_;
  std::vector<float> bias_scaled_;
  std::string name_ = "int8 (kernel built at the first run)";
};

}  // namespace bks
