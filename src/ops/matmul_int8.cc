#include "ops/matmul_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace bks {

using dnnl::memory;
using dt = memory::data_type;

Int8MatMul::Int8MatMul(const dnnl::engine& eng, int64_t m, int64_t n, int64_t k, bool weights_kn, bool bias, bool relu,
                       float slope, float threshold)
    : eng_(eng), m_(m), n_(n), k_(k), kn_(weights_kn), bias_(bias), relu_(relu), slope_(slope),
      scale_(127.f / std::max(threshold, 1e-12f)) {}

void Int8MatMul::build(dnnl::stream& s, const float* w, const float* bias) {
  // Column j of B = W^T is W's row j (or column j when W is stored [k, n]).
  std::vector<float> wscale(n_), oscale(n_);
  for (int64_t j = 0; j < n_; ++j) {
    float mx = 0.f;
    for (int64_t i = 0; i < k_; ++i) mx = std::max(mx, std::fabs(kn_ ? w[i * n_ + j] : w[j * k_ + i]));
    wscale[j] = mx > 0.f ? 127.f / mx : 1.f;
    oscale[j] = 1.f / (scale_ * wscale[j]);
  }
  memory::desc a({m_, k_}, dt::s8, memory::format_tag::ab);
  memory::desc b({k_, n_}, dt::s8, memory::format_tag::any);
  memory::desc c({m_, n_}, dt::f32, memory::format_tag::ab);
  memory::desc bd({1, n_}, dt::f32, memory::format_tag::ab);
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, oscale);
  if (relu_) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, slope_, 0.f);
    attr.set_post_ops(po);
  }
  auto d = bias_ ? dnnl::matmul::desc(a, b, bd, c) : dnnl::matmul::desc(a, b, c);
  dnnl::matmul::primitive_desc pd(d, attr, eng_);
  mm_ = dnnl::matmul(pd);
  a_f32_ = memory({{m_, k_}, dt::f32, memory::format_tag::ab}, eng_, nullptr);
  a_q_ = memory(pd.src_desc(), eng_);
  dnnl::primitive_attr qattr;
  qattr.set_output_scales(0, {scale_});
  quantize_ = std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(a_f32_, a_q_, qattr));
  // Quantized here, row-major [k, n], then packed by a plain reorder (a scaled reorder into
  // every packed layout oneDNN may pick, e.g. for m = 1, is not available).
  std::vector<int8_t> wq(static_cast<size_t>(k_ * n_));
  for (int64_t i = 0; i < k_; ++i)
    for (int64_t j = 0; j < n_; ++j) {
      float v = std::nearbyint((kn_ ? w[i * n_ + j] : w[j * k_ + i]) * wscale[j]);
      wq[i * n_ + j] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
    }
  memory w_plain({{k_, n_}, dt::s8, memory::format_tag::ab}, eng_, wq.data());
  w_q_ = memory(pd.weights_desc(), eng_);
  dnnl::reorder(w_plain, w_q_).execute(s, w_plain, w_q_);
  if (bias_) {
    // oneDNN 2.x adds the bias before the output scale, in the accumulator's units.
    bias_scaled_.resize(n_);
    for (int64_t j = 0; j < n_; ++j) bias_scaled_[j] = bias[j] * scale_ * wscale[j];
    bias_q_ = memory(bd, eng_, bias_scaled_.data());
  }
  c_ = memory(c, eng_, nullptr);
  s.wait();
  name_ = fmt::format("{} int8 (input |x| <= {:.4g})", pd.impl_info_str(), 127.f / scale_);
  built_ = true;
}

void Int8MatMul::run(dnnl::stream& s, const float* a, const float* w, const float* bias, float* c) {
  if (!built_) build(s, w, bias);
  a_f32_.set_data_handle(const_cast<float*>(a));
  quantize_->execute(s, a_f32_, a_q_);
  c_.set_data_handle(c);
  if (bias_)
    mm_.execute(s, {{DNNL_ARG_SRC, a_q_}, {DNNL_ARG_WEIGHTS, w_q_}, {DNNL_ARG_BIAS, bias_q_}, {DNNL_ARG_DST, c_}});
  else
    mm_.execute(s, {{DNNL_ARG_SRC, a_q_}, {DNNL_ARG_WEIGHTS, w_q_}, {DNNL_ARG_DST, c_}});
  s.wait();
}

}  // namespace bks
