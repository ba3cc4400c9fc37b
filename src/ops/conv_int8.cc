#include "ops/fused_post_ops.h"
#include "ops/conv_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/int8_weights.h"
#include "ops/kernel_timing.h"
#include "ops/op_def.h"

namespace bks {

using tag = memory::format_tag;
using dt = memory::data_type;

Int8Thresholds int8_thresholds(const OpContext& c) {
  Int8Thresholds t{c.node.deploy.int8_input_threshold, c.node.deploy.int8_output_threshold,
                   c.node.deploy.int8_residual_threshold};
  if (t.in < 0.f) c.fail("int8_input_threshold must be positive");
  if (t.in > 0.f && c.phase == proto::TRAIN) c.fail("int8_input_threshold is for inference graphs, not TRAIN");
  if (t.out < 0.f) c.fail("int8_output_threshold must be positive");
  if (t.out > 0.f && !(t.in > 0.f)) c.fail("int8_output_threshold needs int8_input_threshold");
  if (t.residual < 0.f) c.fail("int8_residual_threshold must be positive");
  if (t.residual > 0.f && (!(t.in > 0.f) || !c.node.deploy.fusion.residual_sum))
    c.fail("int8_residual_threshold needs int8_input_threshold and a fused residual sum");
  const bool int8 = c.node.deploy.precision == Precision::int8;
  if (int8 && !(t.in > 0.f)) c.fail("int8 precision needs a calibrated int8_input_threshold");
  if (!int8 && t.in > 0.f)
    c.fail("int8 thresholds on a node that computes in {}", precision_name(c.node.deploy.precision));
  return t;
}

namespace {

// Output channels; the weights are (oc, ic, kh, kw), or (groups, oc/groups, ic/groups, kh, kw).
int64_t out_channels(const Int8ConvSpec& sp) { return sp.dst[1]; }
bool grouped(const Int8ConvSpec& sp) { return sp.wei.size() == 5; }

dnnl::convolution_forward::primitive_desc int8_pd(const dnnl::engine& eng, const Int8ConvSpec& sp,
                                                  const memory::desc& src, const memory::desc& dst,
                                                  const dnnl::primitive_attr& attr) {
  memory::desc wei(sp.wei, dt::s8, tag::any), bias({out_channels(sp)}, dt::f32, tag::a);
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_direct;
  auto d = sp.bias ? dnnl::convolution_forward::desc(prop, alg, src, wei, bias, dst, sp.strides, sp.dil, sp.pl, sp.pr)
                   : dnnl::convolution_forward::desc(prop, alg, src, wei, dst, sp.strides, sp.dil, sp.pl, sp.pr);
  return dnnl::convolution_forward::primitive_desc(d, user_scratchpad(attr), eng);
}

// How a fused residual reaches the int8 kernel: already in the destination buffer, stored
// as `type` (a sum post-op, scaled from its own int8 or f32 units into the destination's),
// or read through a binary add as f32 in the destination's units and `layout`.
struct ResidualInput {
  bool in_dst = false;
  float scale = 1.f;
  dt type = dt::undef;
  memory::desc layout;
};

// f32 with md's dimensions and layout.
memory::desc as_f32(const memory::desc& md) {
  memory::desc f = md;
  f.data.data_type = dnnl_f32;
  return f;
}

// Per-output-channel output scales, then the fused residual sum and ReLU, applied to the
// scaled result.
dnnl::primitive_attr int8_attr(const Int8ConvSpec& sp, const std::vector<float>& oscale, const ResidualInput& r) {
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, oscale);
  dnnl::post_ops po;
  if (sp.fusion && sp.fusion->residual_sum) {
    if (r.in_dst)
      po.append_sum(r.scale, r.type);
    else
      po.append_binary(dnnl::algorithm::binary_add, r.layout);
  }
  if (sp.fusion) append_fused_relu(po, *sp.fusion);
  attr.set_post_ops(po);
  return attr;
}

}  // namespace

Int8Conv::Int8Conv(const dnnl::engine& eng, const Int8ConvSpec& spec, const memory::desc& src_user,
                   const memory::desc& dst_user, const memory::desc& residual_md, bool residual_in_dst)
    : eng_(eng),
      spec_(spec),
      src_user_(src_user),
      dst_user_(dst_user),
      residual_md_(residual_md),
      residual_in_dst_(residual_in_dst) {
  if (spec.fusion) fusion_ = *spec.fusion;
  spec_.fusion = &fusion_;
  src_scale_ = int8_levels(src_user.data_type()) / std::max(spec.in_threshold, 1e-12f);
  if (fusion_.residual_sum && is_int8(residual_md) && !(spec.residual_threshold > 0.f))
    throw InputError("an int8 fused residual needs a positive int8_residual_threshold");
  residual_scale_ = is_int8(residual_md) ? int8_levels(residual_md.data_type()) / spec.residual_threshold : 1.f;
  if (is_int8(dst_user)) {
    if (!(spec.out_threshold > 0.f))
      throw InputError("an int8 convolution output needs a positive int8_output_threshold");
    dst_scale_ = int8_levels(dst_user.data_type()) / spec.out_threshold;
  }
  // The kernels bound the output after the output scale, in the destination's levels: a
  // ReLU6 clips at 6 * levels per unit (at 6 itself it cut MobileNet v2's activations to
  // 6 of 255 levels).
  if (fusion_.bounded()) fusion_.relu_max *= dst_scale_;
}

memory::desc Int8Conv::preferred_dst(const dnnl::engine& eng, const Int8ConvSpec& spec, const memory::desc& src_md,
                                     memory::data_type dst_type) {
  const memory::desc src_any(spec.src, dt::s8, tag::any), dst_any(spec.dst, dst_type, tag::any);
  Int8ConvSpec sp = spec;
  FusedPostOps relu_only;
  if (spec.fusion) relu_only = *spec.fusion;
  relu_only.residual_sum = false;  // the residual is read in whatever layout is chosen
  sp.fusion = &relu_only;
  const std::vector<float> ones(static_cast<size_t>(out_channels(spec)), 1.f);
  for (const memory::desc& src : {is_int8(src_md) ? src_md : src_any, src_any}) {
    try {
      auto pd = int8_pd(eng, sp, src, dst_any, int8_attr(sp, ones, ResidualInput{}));
      if (!is_reference_impl(pd.impl_info_str())) return pd.dst_desc();
    } catch (const dnnl::error&) {
    }
  }
  return memory::desc(spec.dst, dst_type, tag::nhwc);
}

void Int8Conv::build(dnnl::stream& s, const float* wei, const float* bias) {
  int64_t all = 1;
  for (int64_t d : spec_.wei) all *= d;
  const int64_t oc = out_channels(spec_), per = all / oc;
  // Per-output-channel weight scales; the output scale undoes both quantizations and
  // applies the output's own.
  std::vector<float> wscale(oc), oscale(oc);
  for (int64_t o = 0; o < oc; ++o) {
    float m = 0.f;
    for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(wei[o * per + i]));
    wscale[o] = int8_weight_scale(m);
    oscale[o] = dst_scale_ / (src_scale_ * wscale[o]);
  }
  // The callers' layouts when oneDNN has a fast kernel for them, else its own choice with
  // conversions at the edges.
  const bool int8_in = is_int8(src_user_);
  memory::desc src_k = int8_in ? src_user_ : memory::desc(spec_.src, dt::s8, tag::any);
  dnnl::convolution_forward::primitive_desc pd;
  bool found = false;
  // A residual in the destination buffer is summed there when the kernel writes that buffer
  // (its values rescaled from the residual's units into the destination's).
  const memory::desc residual_user =
      residual_md_.data.ndims ? residual_md_ : memory::desc(spec_.dst, dt::f32, tag::nchw);
  auto residual_input = [&](const memory::desc& kernel_dst) {
    ResidualInput r;
    r.in_dst = fusion_.residual_sum && residual_in_dst_ && kernel_dst == dst_user_;
    r.scale = dst_scale_ / residual_scale_;
    r.type = residual_user.data_type() == kernel_dst.data_type() ? dt::undef : residual_user.data_type();
    r.layout = as_f32(kernel_dst);
    return r;
  };
  ResidualInput residual = residual_input(dst_user_);
  auto fast_pd = [&](const memory::desc& src, const memory::desc& dst, const ResidualInput& r) {
    try {
      pd = int8_pd(eng_, spec_, src, dst, int8_attr(spec_, oscale, r));
      return !is_reference_impl(pd.impl_info_str());
    } catch (const dnnl::error&) {
      return false;
    }
  };
  found = fast_pd(src_k, dst_user_, residual);
  if (!found && residual.in_dst) {
    // No fast kernel with the sum: a binary add of the residual, copied out of the
    // destination buffer first (below).
    residual.in_dst = false;
    found = fast_pd(src_k, dst_user_, residual);
  }
  if (!found) {
    memory::desc src_any(spec_.src, int8_in ? src_user_.data_type() : dt::s8, tag::any);
    memory::desc dst_any(spec_.dst, dst_user_.data_type(), tag::any);
    ResidualInput binary = residual_input(dst_any);
    binary.layout = memory::desc(spec_.dst, dt::f32, tag::nhwc);
    auto probe = int8_pd(eng_, spec_, src_any, dst_any, int8_attr(spec_, oscale, binary));
    residual = residual_input(probe.dst_desc());
    if (!fast_pd(probe.src_desc(), probe.dst_desc(), residual)) {
      // Whatever oneDNN gives for oneDNN's own layouts (or its error), with a binary add.
      residual.in_dst = false;
      pd = int8_pd(eng_, spec_, probe.src_desc(), probe.dst_desc(), int8_attr(spec_, oscale, residual));
    }
  }
  sum_ = residual.in_dst;
  conv_ = DnnlPrimitive(dnnl::convolution_forward(pd), pd);
  src_.init(eng_, src_user_, pd.src_desc(), int8_in ? 1.f : src_scale_);
  dst_.init(eng_, dst_user_, pd.dst_desc());
  if (fusion_.residual_sum && !sum_)
    res_.init(eng_, residual_user, residual.layout, residual.scale, /*always_copy=*/residual_in_dst_);
  // Weights, once: rounded to int8 here, then reordered into the kernel's layout. Without
  // VNNI oneDNN may halve s8 weights in that reorder (its scale_adjust), so the kernel's levels
  // are a function of these: weights that round to the same levels (a bundle stored with
  // `deploy --compress`) give the same outputs.
  std::vector<int8_t> wq(static_cast<size_t>(all));
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < per; ++i) wq[o * per + i] = int8_weight_level(wei[o * per + i], wscale[o]);
  memory wei_s8({spec_.wei, dt::s8, grouped(spec_) ? tag::goihw : tag::oihw}, eng_, wq.data());
  wei_q_ = memory(pd.weights_desc(), eng_);
  make_reorder(wei_s8, wei_q_).execute(s, {{DNNL_ARG_FROM, wei_s8}, {DNNL_ARG_TO, wei_q_}});
  // oneDNN 2.x adds the bias to the s32 accumulator before the output scale: pre-scale it.
  if (spec_.bias) {
    bias_scaled_.resize(oc);
    for (int64_t o = 0; o < oc; ++o) bias_scaled_[o] = bias[o] * src_scale_ * wscale[o];
    bias_q_ = memory({{oc}, dt::f32, tag::a}, eng_, bias_scaled_.data());
  }
  s.wait();
  built_ = true;
  const std::string onednn = pd.impl_info_str();
  try_own_depthwise(s, wq, oscale);
  auto type = [](const memory::desc& m) {
    return m.data_type() == dt::u8 ? "u8" : m.data_type() == dt::s8 ? "s8" : "f32";
  };
  const std::string relu = !fusion_.relu       ? ""
                           : fusion_.bounded() ? fmt::format(" +clip(0,{:g})", fusion_.relu_max / dst_scale_)
                                               : " +relu";
  name_ = fmt::format("{} int8 ({} in |x| <= {:.4g}, {} out{}{})",
                      dw_ ? "bakusoku dw_3x3_vnni" + tuning_ : onednn + tuning_, type(src_user_), spec_.in_threshold,
                      type(dst_user_), is_int8(dst_user_) ? fmt::format(" |x| <= {:.4g}", spec_.out_threshold) : "",
                      fusion_.residual_sum ? fmt::format(", fused +{}{}", sum_ ? "sum" : "add", relu)
                      : fusion_.relu       ? ", fused" + relu
                                           : "");
}

void Int8Conv::try_own_depthwise(dnnl::stream& s, const std::vector<int8_t>& levels, const std::vector<float>& oscale) {
  const memory::dims &src = spec_.src, &dst = spec_.dst, &w = spec_.wei;
  if (!grouped(spec_) || w[1] != 1 || w[2] != 1 || (!choice_.empty() && choice_ != "dw_int8")) return;
  // oneDNN counts dilation from 0 (no gaps).
  const DwInt8Shape shape{src[0], src[1], src[2], src[3], dst[2], dst[3], spec_.strides[0], spec_.pl[0], spec_.pl[1]};
  if (!DwInt8Conv::applies(w[3], w[4], spec_.strides[0], spec_.strides[1], spec_.dil[0] + 1, spec_.dil[1] + 1, w[0],
                           shape, src_user_, dst_user_, fusion_))
    return;
  auto own = std::make_unique<DwInt8Conv>(shape, dst_user_.data_type(), fusion_);
  own->set_weights(levels.data(), spec_.bias ? bias_scaled_.data() : nullptr, oscale.data());
  if (choice_.empty()) {
    // Zeros in, whatever comes out: the same work as real data for both.
    std::vector<uint8_t> in(src_user_.get_size(), 0), out(dst_user_.get_size(), 0);
    const double theirs = best_of_three_ms([&] { run_onednn(s, in.data(), out.data(), nullptr); });
    const double ours = best_of_three_ms([&] { own->forward(in.data(), out.data()); });
    tuning_ = fmt::format(" (autotuned: {} {:.3f} ms vs {} {:.3f} ms)", ours < theirs ? "dw_int8" : "direct",
                          std::min(ours, theirs), ours < theirs ? "direct" : "dw_int8", std::max(ours, theirs));
    if (ours >= theirs) return;
  } else {
    tuning_ = " (as deploy chose)";
  }
  dw_ = std::move(own);
  algorithm_ = "dw_int8";
}

void Int8Conv::run(dnnl::stream& s, const void* src, const float* wei, const float* bias, void* dst,
                   const float* residual) {
  if (!built_) build(s, wei, bias);
  if (dw_) return dw_->forward(src, dst);
  run_onednn(s, src, dst, residual);
}

void Int8Conv::run_onednn(dnnl::stream& s, const void* src, void* dst, const float* residual) {
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src_.read(s, src)}, {DNNL_ARG_WEIGHTS, wei_q_}, {DNNL_ARG_DST, dst_.write(dst)}};
  if (spec_.bias) args[DNNL_ARG_BIAS] = bias_q_;
  if (fusion_.residual_sum && !sum_) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = res_.read(s, residual);
  conv_.execute(s, args);
  dst_.commit(s);
  s.wait();
}

}  // namespace bks
