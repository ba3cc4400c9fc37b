// 2-D convolution kernels (oneDNN) shared by Convolution and Deconvolution, which is the
// same arithmetic with forward and backward-data swapped.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <string>
#include <vector>

#include "backend/dnnl_util.h"
#include "caffe.pb.h"
#include "graph/graph.h"
#include "ops/conv_attrs.h"
#include "ops/conv_int8.h"
#include "ops/conv_winograd.h"

namespace bks {

struct OpContext;

struct ConvGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // source
  int64_t oc = 0, oh = 0, ow = 0;      // destination
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t group = 1;
};

// The window of a Convolution or Deconvolution node (2-d only) from its attributes (a
// positive num_output, kernel, stride and dilation), errors naming the layer and the field.
ConvGeometry parse_conv_layer(const OpContext& c);
// Caffe's output size: (in + 2 pad - dilated kernel) / stride + 1.
int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d);

class ConvKernels {
 public:
  // g describes the convolution from src (c channels) to dst (oc channels). src_md and
  // dst_md are the layouts of the caller's buffers (data and gradients alike); empty descs
  // mean plain NCHW.
  // need_bwd_data false skips building the backward-data kernel (first layers).
  // `fusion` (inference only): post-ops on the forward output; with residual_sum, the
  // residual (layout residual_md, plain when empty) is added before the ReLU.
  // residual_in_dst: the residual is the destination buffer's content when forward() runs
  // (the planner put the output in its buffer); forward() still gets its pointer.
  void prepare(dnnl::engine& eng, const ConvGeometry& g, bool bias, bool training, const memory::desc& src_md = {},
               const memory::desc& dst_md = {}, bool need_bwd_data = true, const FusedPostOps* fusion = nullptr,
               const memory::desc& residual_md = {}, bool residual_in_dst = false);
  // The destination layout oneDNN's kernel writes fastest for this geometry; with
  // `blocked` (inference), oneDNN's 16-channel blocks on AVX-512 where they do not pad.
  static memory::desc preferred_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias, bool training,
                                    bool blocked = false);
  // The same for the int8 kernel reading src_md (empty: f32), writing `dst_type`.
  static memory::desc preferred_int8_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias,
                                         const memory::desc& src_md, const FusedPostOps* fusion,
                                         memory::data_type dst_type);
  // The same for the bf16 kernel reading src_md (a bf16 layout, or empty: f32), writing
  // bf16 (values kept bf16 between bf16 layers).
  static memory::desc preferred_bf16_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias,
                                         const memory::desc& src_md);
  // src and dst are f32, except around int8 kernels (see set_int8_thresholds) and bf16
  // ones given bf16 layouts.
  void forward(dnnl::stream& s, const void* src, const float* wei, const float* bias, void* dst,
               const float* residual = nullptr);
  void backward_data(dnnl::stream& s, const float* diff_dst, const float* wei, float* diff_src);
  // diff_bias may be null.
  void backward_weights(dnnl::stream& s, const float* src, const float* diff_dst, float* diff_wei, float* diff_bias);
  std::string name() const { return int8_ ? int8_->name() : name_; }
  // Weights never change after the first forward (inference): reordered once, and prepare()
  // times the candidate kernels and keeps the fastest. Call before prepare().
  void set_constant_weights(bool c) { constant_weights_ = c; }
  // "direct", "winograd" (oneDNN's), "winograd_f4" (bakusoku's, conv_winograd.h) or, for
  // INT8, "dw_int8" (bakusoku's, dw_conv_int8.h) skips the timing (a choice saved by
  // deploy); "" times them.
  void set_algorithm_choice(const std::string& a) { choice_ = a; }
  // Inference in bfloat16 (data converted from and to the callers' f32 at the edges).
  void set_bf16(bool b) { bf16_ = b; }
  // INT8 inference with these calibrated thresholds: the input's (0: off), the output's when
  // the destination layout is int8, a fused residual's when it arrives int8; see conv_int8.h.
  void set_int8_thresholds(const Int8Thresholds& t) { int8_thresholds_ = t; }
  // The algorithm the forward kernel runs ("direct", "winograd" or "winograd_f4"; for INT8,
  // "direct" or "dw_int8", known after the first forward).
  const std::string& algorithm() const { return int8_ ? int8_->algorithm() : algorithm_; }

 private:
  // Takes bakusoku's Winograd kernel when it computes this layer and (unless deploy chose it)
  // runs faster than fpd, oneDNN's pick.
  bool try_own_winograd(dnnl::engine& eng, const ConvGeometry& g, const dnnl::convolution_forward::primitive_desc& fpd,
                        const memory::desc& src_user, const memory::desc& dst_user, const FusedPostOps* fusion,
                        const memory::desc& residual_md);

  std::string name_;
  bool bias_ = false;
  DnnlPrimitive fwd_, bwd_data_, bwd_wei_;
  DnnlOperand f_src_, f_wei_, f_dst_, f_bias_, f_residual_;
  bool residual_ = false;
  bool sum_ = false;  // the residual is summed in the destination buffer (a oneDNN sum post-op)
  bool constant_weights_ = false;
  std::string tuning_;  // what autotuning measured, for name()
  std::string choice_, algorithm_ = "direct";
  bool bf16_ = false;
  Int8Thresholds int8_thresholds_;
  std::unique_ptr<Int8Conv> int8_;
  std::unique_ptr<WinogradConv> wino_;
  DnnlOperand d_ddst_, d_wei_, d_dsrc_;
  DnnlOperand w_src_, w_ddst_, w_dwei_, w_dbias_;
  std::vector<float> scratch_bias_;
  size_t oc_ = 0;  // size of the bias gradient
};

}  // namespace bks
