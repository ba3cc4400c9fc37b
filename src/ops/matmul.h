// One row-major GEMM of fixed shape, C[m,n] = op(A)[m,k] * op(B)[k,n] (+ bias[n]), as a
// oneDNN matmul primitive built once. Transposes are strides, never copies. oneDNN's
// brgemm matmul is as fast as its sgemm here and JITs ~80 KB of code where sgemm JITs
// ~3.2 MB of kernels for every variant on first use (measured on AVX-512), so every GEMM
// goes through this; shapes without a fast kernel fall back to sgemm.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>

#include "backend/dnnl_util.h"

namespace bks {

class MatMul {
 public:
  // ta / tb: 'N' or 'T', as in BLAS (A stored [m,k] or [k,m]; B stored [k,n] or [n,k]).
  // relu: a fused ReLU (with Caffe's negative slope) after the bias. constant_b: B never
  // changes after the first run (inference weights), so it is packed once into the layout
  // the kernel reads fastest. bf16 (with constant_b): the GEMM runs in bfloat16.
  void prepare(const dnnl::engine& eng, char ta, char tb, int64_t m, int64_t n, int64_t k, bool bias, bool relu = false,
               float relu_slope = 0.f, bool constant_b = false, bool bf16 = false);
  void run(dnnl::stream& s, const float* a, const float* b, float* c, const float* bias = nullptr);
  std::string name() const { return name_; }

 private:
  DnnlPrimitive prim_;
  dnnl::memory a_, b_, c_, bias_;
  dnnl::memory b_packed_;
  DnnlPrimitive pack_;
  const float* packed_from_ = nullptr;
  // bf16 (inference): A converted in, C converted out, around a bf16 kernel.
  dnnl::memory a_k_, c_k_;
  DnnlPrimitive a_in_, c_out_;
  bool fallback_ = false, has_bias_ = false, relu_ = false;
  float slope_ = 0.f;
  char ta_ = 'N', tb_ = 'N';
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::string name_;
};

}  // namespace bks
