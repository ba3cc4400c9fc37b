// INT8 inference convolution (post-training quantization): the input is quantized
// symmetrically to s8 with the calibrated threshold T (scale 127 / T), the weights per
// output channel (scale 127 / max|w[oc]|), and oneDNN's int8 kernel (VNNI / AMX)
// accumulates in s32 and writes f32 through per-channel output scales, with the layer's
// fused post-ops. Values between ops stay f32. Built at the first run, when the weights are
// known; the weights are quantized once (they never change in an inference session).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "ops/dnnl_util.h"

namespace bks {

struct ConvGeometry;

class Int8Conv {
 public:
  // fusion may be null. residual_md: the layout of a fused residual input.
  Int8Conv(const dnnl::engine& eng, const memory::desc& src_user, const memory::desc& dst_user, const memory::dims& wei_dims,
           const memory::dims& strides, const memory::dims& dil, const memory::dims& pl, const memory::dims& pr,
           bool bias, float threshold, const proto::FusionParameter* fusion, const memory::desc& residual_md);
  void run(dnnl::stream& s, const float* src, const float* wei, const float* bias, float* dst, const float* residual);
  std::string name() const { return name_; }

 private:
  void build(dnnl::stream& s, const float* wei, const float* bias);

  dnnl::engine eng_;
  memory::desc src_user_, dst_user_, residual_md_;
  memory::dims wei_dims_, strides_, dil_, pl_, pr_;
  bool bias_, relu_ = false, residual_ = false;
  float slope_ = 0.f, src_scale_;
  bool built_ = false;
  dnnl::convolution_forward conv_;
  memory src_f32_, src_q_, wei_q_, bias_q_, dst_k_, dst_u_, res_u_, res_k_;
  std::unique_ptr<dnnl::reorder> quantize_, dst_out_, res_in_;
  std::vector<float> bias_scaled_;
  std::string name_ = "int8 (kernel built at the first run)";
};

}  // namespace bks
