#include "ops/matmul_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ops/int8_weights.h"

namespace bks {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

Int8MatMul::Int8MatMul(const dnnl::engine& eng, const Int8MatMulSpec& spec, const memory::desc& src_user,
                       memory::data_type dst_type)
    : eng_(eng), spec_(spec), dst_type_(dst_type) {
  src_user_ = src_user.data.ndims ? src_user : memory::desc({spec.m, spec.k}, dt::f32, tag::ab);
  src_type_ = is_int8(src_user_) ? src_user_.data_type() : dt::s8;
  src_scale_ = int8_levels(src_type_) / std::max(spec.in_threshold, 1e-12f);
  if (dst_type != dt::f32) dst_scale_ = int8_levels(dst_type) / std::max(spec.out_threshold, 1e-12f);
}

void Int8MatMul::build(dnnl::stream& s, const float* w, const float* bias) {
  const int64_t m = spec_.m, n = spec_.n, k = spec_.k;
  const bool kn = spec_.weights_kn;
  // Column j of B = W^T is W's row j (or column j when W is stored [k, n]).
  std::vector<float> wscale(n), oscale(n);
  for (int64_t j = 0; j < n; ++j) {
    float mx = 0.f;
    for (int64_t i = 0; i < k; ++i) mx = std::max(mx, std::fabs(kn ? w[i * n + j] : w[j * k + i]));
    wscale[j] = int8_weight_scale(mx);
    oscale[j] = dst_scale_ / (src_scale_ * wscale[j]);
  }
  memory::desc a({m, k}, src_type_, tag::ab);
  memory::desc b({k, n}, dt::s8, tag::any);
  memory::desc c({m, n}, dst_type_, tag::ab);
  memory::desc bd({1, n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, oscale);
  if (spec_.relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, spec_.slope, 0.f);
    attr.set_post_ops(po);
  }
  auto d = spec_.bias ? dnnl::matmul::desc(a, b, bd, c) : dnnl::matmul::desc(a, b, c);
  dnnl::matmul::primitive_desc pd(d, user_scratchpad(attr), eng_);
  mm_ = DnnlPrimitive(dnnl::matmul(pd), pd);
  // The input, in its own layout and full shape, becomes plain int8 rows (quantized when it
  // is f32); a plain int8 input is read as it is.
  a_in_.init(eng_, src_user_, memory::desc(src_user_.dims(), src_type_, plain_tag(src_user_.data.ndims)),
             is_int8(src_user_) ? 1.f : src_scale_);
  a_ = memory(a, eng_, nullptr);
  // Quantized here, row-major [k, n], then packed by a plain reorder (a scaled reorder into
  // every packed layout oneDNN may pick, e.g. for m = 1, is not available).
  std::vector<int8_t> wq(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) wq[i * n + j] = int8_weight_level(kn ? w[i * n + j] : w[j * k + i], wscale[j]);
  memory w_plain({{k, n}, dt::s8, tag::ab}, eng_, wq.data());
  w_q_ = memory(pd.weights_desc(), eng_);
  make_reorder(w_plain, w_q_).execute(s, {{DNNL_ARG_FROM, w_plain}, {DNNL_ARG_TO, w_q_}});
  if (spec_.bias) {
    // oneDNN 2.x adds the bias before the output scale, in the accumulator's units.
    bias_scaled_.resize(n);
    for (int64_t j = 0; j < n; ++j) bias_scaled_[j] = bias[j] * src_scale_ * wscale[j];
    bias_q_ = memory(bd, eng_, bias_scaled_.data());
  }
  c_ = memory(c, eng_, nullptr);
  s.wait();
  auto type = [](dt t) { return t == dt::u8 ? "u8" : t == dt::s8 ? "s8" : "f32"; };
  name_ = fmt::format("{} int8 ({} in |x| <= {:.4g}, {} out{}{})", pd.impl_info_str(),
                      type(is_int8(src_user_) ? src_type_ : dt::f32), spec_.in_threshold, type(dst_type_),
                      dst_type_ != dt::f32 ? fmt::format(" |x| <= {:.4g}", spec_.out_threshold) : "",
                      spec_.relu ? ", fused +relu" : "");
  built_ = true;
}

void Int8MatMul::run(dnnl::stream& s, const void* a, const float* w, const float* bias, void* c) {
  if (!built_) build(s, w, bias);
  a_.set_data_handle(a_in_.read(s, a).get_data_handle());
  c_.set_data_handle(c);
  if (spec_.bias)
    mm_.execute(s, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, w_q_}, {DNNL_ARG_BIAS, bias_q_}, {DNNL_ARG_DST, c_}});
  else
    mm_.execute(s, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, w_q_}, {DNNL_ARG_DST, c_}});
  s.wait();
}

}  // namespace bks
