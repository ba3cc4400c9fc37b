#include "ops/conv_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace bks {

using tag = memory::format_tag;
using dt = memory::data_type;

Int8Conv::Int8Conv(const dnnl::engine& eng, const memory::desc& src_user, const memory::desc& dst_user,
                   const memory::dims& wei_dims, const memory::dims& strides, const memory::dims& dil,
                   const memory::dims& pl, const memory::dims& pr, bool bias, float threshold,
                   const proto::FusionParameter* fusion, const memory::desc& residual_md)
    : eng_(eng), src_user_(src_user), dst_user_(dst_user), residual_md_(residual_md), wei_dims_(wei_dims),
      strides_(strides), dil_(dil), pl_(pl), pr_(pr), bias_(bias), src_scale_(127.f / std::max(threshold, 1e-12f)) {
  if (fusion) {
    relu_ = fusion->relu();
    slope_ = fusion->relu_negative_slope();
    residual_ = fusion->residual_sum();
  }
}

void Int8Conv::build(dnnl::stream& s, const float* wei, const float* bias) {
  const int64_t oc = wei_dims_[0], per = wei_dims_[1] * wei_dims_[2] * wei_dims_[3];
  // Per-output-channel weight scales; the output scale undoes both quantizations.
  std::vector<float> wscale(oc), oscale(oc);
  for (int64_t o = 0; o < oc; ++o) {
    float m = 0.f;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(wei[o * per + i]));
    wscale[o] = m > 0.f ? 127.f / m : 1.f;
    oscale[o] = 1.f / (src_scale_ * wscale[o]);
  }
  const memory::dims src_dims = src_user_.dims(), dst_dims = dst_user_.dims();
  memory::desc src_q(src_dims, dt::s8, tag::any), wei_q(wei_dims_, dt::s8, tag::any), dst_k(dst_dims, dt::f32, tag::any);
  memory::desc bias_md({oc}, dt::f32, tag::a);
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, oscale);
  // Post-ops on the f32 result: the residual must be in the destination's layout, which
  // oneDNN picks; ask once without them to learn it.
  auto make = [&](const dnnl::primitive_attr& a, const memory::desc& dst) {
    auto d = bias_ ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                     src_q, wei_q, bias_md, dst, strides_, dil_, pl_, pr_)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                     src_q, wei_q, dst, strides_, dil_, pl_, pr_);
    return dnnl::convolution_forward::primitive_desc(d, a, eng_);
  };
  auto pd = make(attr, dst_k);
  if (relu_ || residual_) {
    dnnl::post_ops po;
    if (residual_) po.append_binary(dnnl::algorithm::binary_add, pd.dst_desc());
    if (relu_) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, slope_, 0.f);
    attr.set_post_ops(po);
    pd = make(attr, pd.dst_desc());
  }
  conv_ = dnnl::convolution_forward(pd);
  // Input quantization: f32 in the caller's layout -> s8 in the kernel's, scaled.
  src_f32_ = memory(src_user_, eng_, nullptr);
  src_q_ = memory(pd.src_desc(), eng_);
  dnnl::primitive_attr qattr;
  qattr.set_output_scales(0, {src_scale_});
  quantize_ = std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(src_f32_, src_q_, qattr));
  // Weights, once.
  memory wei_f32({wei_dims_, dt::f32, tag::oihw}, eng_, const_cast<float*>(wei));
  wei_q_ = memory(pd.weights_desc(), eng_);
  dnnl::primitive_attr wattr;
  wattr.set_output_scales(1 << 0, wscale);
  dnnl::reorder(dnnl::reorder::primitive_desc(wei_f32, wei_q_, wattr)).execute(s, wei_f32, wei_q_);
  // oneDNN 2.x adds the bias to the s32 accumulator before the output scale: pre-scale it.
  if (bias_) {
    bias_scaled_.resize(oc);
    for (int64_t o = 0; o < oc; ++o) bias_scaled_[o] = bias[o] * src_scale_ * wscale[o];
    bias_q_ = memory(bias_md, eng_, bias_scaled_.data());
  }
  dst_u_ = memory(dst_user_, eng_, nullptr);
  if (pd.dst_desc() != dst_user_) {
    dst_k_ = memory(pd.dst_desc(), eng_);
    dst_out_ = std::make_unique<dnnl::reorder>(dst_k_, dst_u_);
  }
  if (residual_) {
    memory::desc r = residual_md_.data.ndims ? residual_md_ : memory::desc(dst_dims, dt::f32, tag::nchw);
    res_u_ = memory(r, eng_, nullptr);
    if (r != pd.dst_desc()) {
      res_k_ = memory(pd.dst_desc(), eng_);
      res_in_ = std::make_unique<dnnl::reorder>(res_u_, res_k_);
    }
  }
  s.wait();
  name_ = fmt::format("{} int8 (input |x| <= {:.4g})", pd.impl_info_str(), 127.f / src_scale_);
  built_ = true;
}

void Int8Conv::run(dnnl::stream& s, const float* src, const float* wei, const float* bias, float* dst, const float* residual) {
  if (!built_) build(s, wei, bias);
  src_f32_.set_data_handle(const_cast<float*>(src));
  quantize_->execute(s, src_f32_, src_q_);
  dst_u_.set_data_handle(dst);
  memory& out = dst_out_ ? dst_k_ : dst_u_;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_q_}, {DNNL_ARG_WEIGHTS, wei_q_}, {DNNL_ARG_DST, out}};
  if (bias_) args[DNNL_ARG_BIAS] = bias_q_;
  if (residual_) {
    res_u_.set_data_handle(const_cast<float*>(residual));
    if (res_in_) res_in_->execute(s, res_u_, res_k_);
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = res_in_ ? res_k_ : res_u_;
  }
  conv_.execute(s, args);
  if (dst_out_) dst_out_->execute(s, dst_k_, dst_u_);
  s.wait();
}

}  // namespace bks
