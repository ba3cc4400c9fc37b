// INT8 inference GEMM for InnerProduct: C[m,n] = A[m,k] W[n,k]^T (+ bias, ReLU), W quantized
// per output column (scale 127 / max|W[j,:]|), accumulated in s32 by oneDNN's int8 matmul
// (VNNI / AMX). A is f32 (quantized here to s8 with the calibrated threshold, from whatever
// layout it is kept in) or already int8 from the layer before; C is f32, or int8 for an int8
// reader. Built at the first run, when the weights are known.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "backend/dnnl_util.h"

namespace bks {

struct Int8MatMulSpec {
  int64_t m = 0, n = 0, k = 0;
  bool weights_kn = false;  // W stored [k, n] (InnerProduct's transpose) instead of [n, k]
  bool bias = false, relu = false;
  float slope = 0.f;
  float in_threshold = 0.f, out_threshold = 0.f;  // see conv_int8.h
};

class Int8MatMul {
 public:
  // src_user: the input's layout and type over its full shape (empty: plain f32);
  // dst_type: f32, s8 or u8 (plain [m, n]).
  Int8MatMul(const dnnl::engine& eng, const Int8MatMulSpec& spec, const memory::desc& src_user,
             memory::data_type dst_type);
  void run(dnnl::stream& s, const void* a, const float* w, const float* bias, void* c);
  std::string name() const { return name_; }

 private:
  void build(dnnl::stream& s, const float* w, const float* bias);

  dnnl::engine eng_;
  Int8MatMulSpec spec_;
  memory::desc src_user_;
  memory::data_type src_type_, dst_type_;
  float src_scale_, dst_scale_ = 1.f;
  bool built_ = false;
  DnnlPrimitive mm_;
  DnnlOperand a_in_;  // the input as plain int8 rows
  memory a_, w_q_, bias_q_, c_;
  std::vector<float> bias_scaled_;
  std::string name_ = "int8 (kernel built at the first run)";
};

}  // namespace bks
