// INT8 inference convolution (post-training quantization). Weights are quantized per output
// channel (scale 127 / max|w[oc]|); oneDNN's int8 kernel (VNNI / AMX) accumulates in s32.
// The input is either f32, quantized here symmetrically to s8 with the calibrated threshold T
// (scale 127 / T), or already int8 from the layer before (s8 with scale 127 / T, or u8 with
// 255 / T after a ReLU). The output is f32, or int8 for an int8 reader (scale by its own
// threshold), so consecutive int8 layers pass int8 tensors without converting. Built at the
// first run, when the weights are known; they never change in an inference session.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "backend/dnnl_util.h"
#include "caffe.pb.h"
#include "graph/graph.h"
#include "ops/dw_conv_int8.h"

namespace bks {

struct OpContext;

// The INT8 thresholds deploy gave a Convolution or InnerProduct (deploy.int8_input_threshold,
// deploy.int8_output_threshold; 0 when absent), checked: positive, inference only, an output one
// only with an input one.
struct Int8Thresholds {
  float in = 0.f, out = 0.f, residual = 0.f;
};
Int8Thresholds int8_thresholds(const OpContext& c);

struct Int8ConvSpec {
  memory::dims src, dst, wei, strides, dil, pl, pr;
  bool bias = false;
  float in_threshold = 0.f;              // |x| the input's largest level stands for
  float out_threshold = 0.f;             // the same for an int8 output (unused when it is f32)
  float residual_threshold = 0.f;        // and for an int8 fused residual (unused when it is f32)
  const FusedPostOps* fusion = nullptr;  // may be null
};

class Int8Conv {
 public:
  // src_user / dst_user: the callers' layouts and types (f32, s8 or u8). residual_md: the
  // layout of a fused residual input (f32 outputs only); residual_in_dst: it is the
  // destination buffer's content when run() is called (summed there).
  Int8Conv(const dnnl::engine& eng, const Int8ConvSpec& spec, const memory::desc& src_user,
           const memory::desc& dst_user, const memory::desc& residual_md, bool residual_in_dst = false);
  // The destination layout the kernel writes fastest, of type `dst_type`, reading `src_md`
  // (empty: f32 to be quantized here).
  static memory::desc preferred_dst(const dnnl::engine& eng, const Int8ConvSpec& spec, const memory::desc& src_md,
                                    memory::data_type dst_type);
  // "" times bakusoku's own depthwise kernel (dw_conv_int8.h) against oneDNN's where it
  // applies and keeps the faster; "dw_int8" takes it where it applies, anything else
  // oneDNN's (deploy's choice).
  void set_algorithm_choice(const std::string& c) { choice_ = c; }
  // What runs: "direct" (oneDNN) or "dw_int8"; "direct" until the first run builds it.
  const std::string& algorithm() const { return algorithm_; }
  void run(dnnl::stream& s, const void* src, const float* wei, const float* bias, void* dst, const float* residual);
  std::string name() const { return name_; }

 private:
  void build(dnnl::stream& s, const float* wei, const float* bias);
  void run_onednn(dnnl::stream& s, const void* src, void* dst, const float* residual);
  // Takes bakusoku's depthwise kernel where it computes this convolution and deploy chose it
  // or (no choice yet) it runs faster than oneDNN's; `levels` are the rounded weights.
  void try_own_depthwise(dnnl::stream& s, const std::vector<int8_t>& levels, const std::vector<float>& oscale);

  dnnl::engine eng_;
  Int8ConvSpec spec_;
  FusedPostOps fusion_;
  memory::desc src_user_, dst_user_, residual_md_;
  bool residual_in_dst_ = false, sum_ = false;
  float residual_scale_ = 1.f;  // the residual's levels per unit (1: f32)
  float src_scale_, dst_scale_ = 1.f;
  bool built_ = false;
  DnnlPrimitive conv_;
  memory wei_q_, bias_q_;
  DnnlOperand src_, dst_, res_;
  std::vector<float> bias_scaled_;
  std::unique_ptr<DwInt8Conv> dw_;
  std::string choice_, algorithm_ = "direct", tuning_;
  std::string name_ = "int8 (kernel built at the first run)";
};

}  // namespace bks
