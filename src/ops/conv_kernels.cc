#include "ops/conv_kernels.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "ops/fused_post_ops.h"
#include "ops/kernel_timing.h"
#include "ops/op_def.h"

namespace bks {

using tag = memory::format_tag;
using dt = memory::data_type;

int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - (d * (k - 1) + 1)) / s + 1;
}

void ConvAttrs::visit(AttrVisitor& v) {
  v.field("num_output", num_output);
  v.field("bias_term", bias_term);
  v.field("kernel", kernel);
  v.field("stride", stride);
  v.field("pad", pad);
  v.field("dilation", dilation);
  v.field("group", group);
  v.field("axis", axis);
  v.field("weight_filler", weight_filler);
  v.field("bias_filler", bias_filler);
}

void conv_from_caffe(const proto::LayerParameter& l, ConvAttrs& a, const std::string& where) {
  const proto::ConvolutionParameter& p = l.convolution_param();
  auto fail = [&](const std::string& m) { input_error("{}: convolution_param: {}", where, m); };
  // A repeated field (one value for both axes, or one per axis) or its _h/_w pair.
  auto two = [&](const google::protobuf::RepeatedField<uint32_t>& v, bool has_h, uint32_t hv, bool has_w, uint32_t wv,
                 std::vector<int64_t> dflt, const char* field, const char* stem) -> std::vector<int64_t> {
    if (has_h || has_w) {
      if (v.size() > 0) fail(fmt::format("give either {0} or {1}_h/{1}_w, not both", field, stem));
      if (!(has_h && has_w)) fail(fmt::format("{0}_h and {0}_w must be given together", stem));
      return {hv, wv};
    }
    if (v.size() == 0) return dflt;
    if (v.size() == 1) return {v[0], v[0]};
    if (v.size() == 2) return {v[0], v[1]};
    fail(fmt::format("{} has {} values; only 2-d convolution is supported", field, v.size()));
    return {};
  };
  a.num_output = p.num_output();
  a.bias_term = p.bias_term();
  a.kernel = two(p.kernel_size(), p.has_kernel_h(), p.kernel_h(), p.has_kernel_w(), p.kernel_w(), {0, 0}, "kernel_size",
                 "kernel");
  a.stride =
      two(p.stride(), p.has_stride_h(), p.stride_h(), p.has_stride_w(), p.stride_w(), {1, 1}, "stride", "stride");
  a.pad = two(p.pad(), p.has_pad_h(), p.pad_h(), p.has_pad_w(), p.pad_w(), {0, 0}, "pad", "pad");
  a.dilation = two(p.dilation(), false, 0, false, 0, {1, 1}, "dilation", "dilation");
  a.group = p.group();
  a.axis = p.axis();
  a.weight_filler = filler_from_caffe(p.weight_filler());
  a.bias_filler = filler_from_caffe(p.bias_filler());
}

void conv_to_caffe(const ConvAttrs& a, proto::LayerParameter& l) {
  proto::ConvolutionParameter* p = l.mutable_convolution_param();
  p->Clear();
  p->set_num_output(static_cast<uint32_t>(a.num_output));
  p->set_bias_term(a.bias_term);
  // One value when both axes agree, as prototxt files write it.
  auto put = [](google::protobuf::RepeatedField<uint32_t>* f, const std::vector<int64_t>& v) {
    if (v.size() == 2 && v[0] == v[1])
      f->Add(static_cast<uint32_t>(v[0]));
    else
      for (int64_t x : v) f->Add(static_cast<uint32_t>(x));
  };
  put(p->mutable_kernel_size(), a.kernel);
  put(p->mutable_stride(), a.stride);
  put(p->mutable_pad(), a.pad);
  put(p->mutable_dilation(), a.dilation);
  p->set_group(static_cast<uint32_t>(a.group));
  p->set_axis(static_cast<int32_t>(a.axis));
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
}

ConvGeometry parse_conv_layer(const OpContext& c) {
  const ConvAttrs& a = c.node.attrs.as<ConvAttrs>();
  if (a.num_output <= 0) c.fail("convolution_param.num_output must be positive");
  // Caffe's fields are 32-bit; the bound also keeps the output-size arithmetic from overflowing.
  constexpr int64_t kMax = INT32_MAX;
  if (a.num_output > kMax || a.group > kMax) c.fail("convolution_param: num_output and group must be at most {}", kMax);
  auto pair = [&](const std::vector<int64_t>& v, const char* field, int64_t& h, int64_t& w) {
    if (v.size() != 2)
      c.fail("convolution_param: {} has {} values; only 2-d convolution is supported", field, v.size());
    h = v[0];
    w = v[1];
    if (h > kMax || w > kMax) c.fail("convolution_param: {} must be at most {}", field, kMax);
  };
  ConvGeometry g;
  pair(a.kernel, "kernel_size", g.kh, g.kw);
  if (g.kh <= 0 || g.kw <= 0)
    c.fail("convolution_param: kernel_size (or kernel_h/kernel_w) must be given and positive");
  pair(a.stride, "stride", g.sh, g.sw);
  if (g.sh <= 0 || g.sw <= 0) c.fail("convolution_param: stride must be positive");
  pair(a.pad, "pad", g.ph, g.pw);
  if (g.ph < 0 || g.pw < 0) c.fail("convolution_param: pad must not be negative");
  pair(a.dilation, "dilation", g.dh, g.dw);
  if (g.dh <= 0 || g.dw <= 0) c.fail("convolution_param: dilation must be positive");
  g.group = a.group;
  if (g.group <= 0) c.fail("convolution_param: group must be positive");
  if (a.axis != 1) c.fail("convolution_param: convolution over axis other than 1 is not supported");
  return g;
}

namespace {

struct ConvDescs {
  memory::dims src, dst, wei, strides, dil, pl, pr;
  memory::format_tag wtag;
};

ConvDescs conv_descs(const ConvGeometry& g) {
  ConvDescs d;
  d.src = {g.n, g.c, g.h, g.w};
  d.dst = {g.n, g.oc, g.oh, g.ow};
  d.wei = g.group > 1 ? memory::dims{g.group, g.oc / g.group, g.c / g.group, g.kh, g.kw}
                      : memory::dims{g.oc, g.c, g.kh, g.kw};
  d.wtag = g.group > 1 ? tag::goihw : tag::oihw;
  d.strides = {g.sh, g.sw};
  d.dil = {g.dh - 1, g.dw - 1};
  d.pl = {g.ph, g.pw};
  // Right/bottom padding so oneDNN's output size equals Caffe's (floor) rule.
  d.pr = {(g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1 - g.h - g.ph,
          (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 - g.w - g.pw};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(dnnl::engine& eng, const ConvGeometry& g, bool bias, bool training,
                                                     const memory::desc& src, const memory::desc& dst,
                                                     const dnnl::primitive_attr& attr = {},
                                                     dnnl::algorithm alg = dnnl::algorithm::convolution_direct,
                                                     bool bf16 = false) {
  ConvDescs d = conv_descs(g);
  memory::desc wei_any(d.wei, bf16 ? dt::bf16 : dt::f32, tag::any);
  memory::desc bias_md({g.oc}, dt::f32, tag::a);
  auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  auto desc = bias
                  ? dnnl::convolution_forward::desc(prop, alg, src, wei_any, bias_md, dst, d.strides, d.dil, d.pl, d.pr)
                  : dnnl::convolution_forward::desc(prop, alg, src, wei_any, dst, d.strides, d.dil, d.pl, d.pr);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(attr), eng);
}

// oneDNN post-ops for a fused residual sum and ReLU. The residual is either already in the
// destination's buffer (`in_dst`: a `sum` post-op, which keeps oneDNN 2.6 on its brgemm
// kernels) or read by a binary add in the destination's layout.
dnnl::primitive_attr fusion_attr(const FusedPostOps* f, const memory::desc& dst, bool in_dst) {
  dnnl::primitive_attr attr;
  if (!f) return attr;
  dnnl::post_ops po;
  if (f->residual_sum && in_dst) po.append_sum(1.f);
  if (f->residual_sum && !in_dst) po.append_binary(dnnl::algorithm::binary_add, dst);
  append_fused_relu(po, *f);
  attr.set_post_ops(po);
  return attr;
}

// Milliseconds one forward call takes with this kernel, converting from and to the
// caller's layouts as the real call would (best of 3 after a warm-up, on zeroed scratch
// buffers). `residual`: the kernel reads one through a binary post-op.
double time_forward(dnnl::engine& eng, const dnnl::convolution_forward::primitive_desc& pd,
                    const memory::desc& src_user, const memory::desc& dst_user, bool bias, bool residual) {
  dnnl::stream s(eng);
  memory us(src_user, eng), ud(dst_user, eng), ks(pd.src_desc(), eng), kd(pd.dst_desc(), eng),
      w(pd.weights_desc(), eng);
  for (memory* m : {&us, &ks, &kd, &w}) std::memset(m->get_data_handle(), 0, m->get_desc().get_size());
  DnnlPrimitive conv(dnnl::convolution_forward(pd), pd);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ks}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, kd}};
  if (bias) {
    memory b(pd.bias_desc(), eng);
    std::memset(b.get_data_handle(), 0, b.get_desc().get_size());
    args[DNNL_ARG_BIAS] = b;
  }
  if (residual) {
    memory r(pd.dst_desc(), eng);
    std::memset(r.get_data_handle(), 0, r.get_desc().get_size());
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = r;
  }
  const bool in = src_user != pd.src_desc(), out = dst_user != pd.dst_desc();
  DnnlPrimitive rin, rout;
  if (in) rin = make_reorder(us, ks);
  if (out) rout = make_reorder(kd, ud);
  return best_of_three_ms([&] {
    if (in) rin.execute(s, {{DNNL_ARG_FROM, us}, {DNNL_ARG_TO, ks}});
    conv.execute(s, args);
    if (out) rout.execute(s, {{DNNL_ARG_FROM, kd}, {DNNL_ARG_TO, ud}});
    s.wait();
  });
}

// The same for bakusoku's Winograd kernel (on zero weights and data).
double time_own_winograd(const WinogradShape& ws, const FusedPostOps& post) {
  WinogradConv k(ws, post);
  std::vector<float> w(static_cast<size_t>(ws.oc * ws.c * 9), 0.f);
  std::vector<float> src(static_cast<size_t>(ws.n * ws.c * ws.h * ws.w), 0.f);
  std::vector<float> dst(static_cast<size_t>(ws.n * ws.oc * ws.oh * ws.ow), 0.f), res(post.residual_sum ? dst.size() : 0);
  k.set_weights(w.data(), nullptr);
  return best_of_three_ms([&] { k.forward(src.data(), dst.data(), post.residual_sum ? res.data() : nullptr); });
}

Int8ConvSpec int8_spec(const ConvGeometry& g, bool bias, const Int8Thresholds& t, const FusedPostOps* fusion) {
  ConvDescs d = conv_descs(g);
  return {d.src, d.dst, d.wei, d.strides, d.dil, d.pl, d.pr, bias, t.in, t.out, t.residual, fusion};
}

// Below this many input channels (first layers), oneDNN 2.6's kernels for its own
// channel-blocked destination beat the channels-last ones by far (LeNet's conv1, forward
// + backward-weights: 0.65 vs 1.18 ms on AVX-512); pooling reads that layout directly.
constexpr int64_t kFewChannels = 4;
}  // namespace

memory::desc ConvKernels::preferred_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias, bool training,
                                        bool blocked) {
  if (g.c < kFewChannels && g.group == 1) {
    memory::desc src(conv_descs(g).src, dt::f32, tag::nchw);
    memory::desc dst_any({g.n, g.oc, g.oh, g.ow}, dt::f32, tag::any);
    auto pd = forward_pd(eng, g, bias, training, src, dst_any);
    if (!is_reference_impl(pd.impl_info_str())) return pd.dst_desc();
  }
  // Without AVX-512 (no brgemm kernels), oneDNN's jit:avx2 kernels run fastest in their own
  // 8-channel blocks: ResNet-50 at batch 1, 1 thread, 140 -> 108 ms median; a residual added
  // in channels-last took 6.2 ms where the blocked one took 1.4 ms.
  // Channel counts that would pad (LeNet's 20 and 50) stay channels-last: LeNet at batch 256
  // ran 0.82x ONNX Runtime's speed blocked.
  if (!training && !onednn_has_avx512() && g.oc % 8 == 0) {
    memory::desc src_any(conv_descs(g).src, dt::f32, tag::any);
    memory::desc dst_any({g.n, g.oc, g.oh, g.ow}, dt::f32, tag::any);
    auto pd = forward_pd(eng, g, bias, training, src_any, dst_any);
    if (!is_reference_impl(pd.impl_info_str())) return pd.dst_desc();
  }
  // On AVX-512, channels-last runs oneDNN's brgemm kernels and 16-channel blocks its older
  // jit ones (jit_1x1, jit_dw), which won on MobileNet v1 at batch 32 (174-178 ms against
  // 185-204) and lost on others: deploy times both (choose_activation_layout).
  if (!training && blocked && onednn_has_avx512() && g.oc % 16 == 0)
    return memory::desc({g.n, g.oc, g.oh, g.ow}, dt::f32, tag::nChw16c);
  // Otherwise channels-last: no channel padding (LeNet's 20 and 50 channels would pad to
  // 32 and 64 in 16-blocked layouts) and oneDNN's fastest (brgemm) kernels on AVX-512.
  return memory::desc({g.n, g.oc, g.oh, g.ow}, dt::f32, tag::nhwc);
}

memory::desc ConvKernels::preferred_int8_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias,
                                             const memory::desc& src_md, const FusedPostOps* fusion,
                                             memory::data_type dst_type) {
  return Int8Conv::preferred_dst(eng, int8_spec(g, bias, {1.f, 1.f, 1.f}, fusion), src_md, dst_type);
}

memory::desc ConvKernels::preferred_bf16_dst(dnnl::engine& eng, const ConvGeometry& g, bool bias,
                                             const memory::desc& src_md) {
  ConvDescs d = conv_descs(g);
  const memory::desc src_any(d.src, dt::bf16, tag::any), dst_any(d.dst, dt::bf16, tag::any);
  const bool bf16_src = is_bf16(src_md);
  auto pd = forward_pd(eng, g, bias, false, bf16_src ? src_md : src_any, dst_any, {},
                       dnnl::algorithm::convolution_direct, true);
  if (bf16_src && is_reference_impl(pd.impl_info_str()))
    pd = forward_pd(eng, g, bias, false, src_any, dst_any, {}, dnnl::algorithm::convolution_direct, true);
  return pd.dst_desc();
}

void ConvKernels::prepare(dnnl::engine& eng, const ConvGeometry& g, bool bias, bool training,
                          const memory::desc& src_md, const memory::desc& dst_md, bool need_bwd_data,
                          const FusedPostOps* fusion, const memory::desc& residual_md, bool residual_in_dst) {
  bias_ = bias;
  ConvDescs d = conv_descs(g);
  const auto &src = d.src, &dst = d.dst, &wei = d.wei, &strides = d.strides, &dil = d.dil, &pl = d.pl, &pr = d.pr;
  memory::desc src_any(src, dt::f32, tag::any), dst_any(dst, dt::f32, tag::any), wei_any(wei, dt::f32, tag::any);
  memory::desc bias_md({g.oc}, dt::f32, tag::a);
  memory::desc dst_user = dst_md.data.ndims ? dst_md : memory::desc(dst, dt::f32, tag::nchw);
  bool dst_nhwc = dst_user == memory::desc(dst, dt::f32, tag::nhwc);
  // With one channel, NCHW and NHWC are the same bytes; saying NHWC lets a channels-last
  // kernel read a plain single-channel input without a reorder.
  memory::desc src_user =
      src_md.data.ndims ? src_md : memory::desc(src, dt::f32, g.c == 1 && dst_nhwc ? tag::nhwc : tag::nchw);
  memory::desc wei_user(wei, dt::f32, d.wtag);
  // Run on the caller's layouts when oneDNN has a fast kernel for them; otherwise let it
  // choose and convert at the edges (never a reference kernel when a fast one exists).
  memory::desc src_k = src_md.data.ndims || g.c == 1 ? src_user : src_any, dst_k = dst_md.data.ndims ? dst_md : dst_any;
  int8_.reset();
  if (int8_thresholds_.in > 0.f && !training) {
    int8_ = std::make_unique<Int8Conv>(eng, int8_spec(g, bias, int8_thresholds_, fusion), src_user, dst_user,
                                       residual_md, residual_in_dst);
    int8_->set_algorithm_choice(constant_weights_ ? choice_ : "direct");
    return;
  }
  const bool bf16 = bf16_ && !training;
  if (bf16) {
    // bf16 kernels on the caller's layouts where those hold bf16 (values kept bf16 between
    // bf16 layers), else on oneDNN's own: the operands below convert f32 <-> bf16.
    src_k = is_bf16(src_user) ? src_user : memory::desc(src, dt::bf16, tag::any);
    dst_k = is_bf16(dst_user) ? dst_user : memory::desc(dst, dt::bf16, tag::any);
  }
  dnnl::convolution_forward::primitive_desc fpd =
      forward_pd(eng, g, bias, training, src_k, dst_k, {}, dnnl::algorithm::convolution_direct, bf16);
  if (bf16 && is_reference_impl(fpd.impl_info_str())) {
    src_k = memory::desc(src, dt::bf16, tag::any);
    dst_k = memory::desc(dst, dt::bf16, tag::any);
    fpd = forward_pd(eng, g, bias, training, src_k, dst_k, {}, dnnl::algorithm::convolution_direct, true);
  }
  if (bf16 && is_reference_impl(fpd.impl_info_str()))
    throw InputError("bfloat16 convolution: oneDNN has no fast kernel for it on this CPU");
  if (is_reference_impl(fpd.impl_info_str())) {
    src_k = src_any;
    dst_k = dst_any;
    fpd = forward_pd(eng, g, bias, training, src_k, dst_k);
  }
  // A residual already in the destination's buffer is summed there when the kernel writes
  // that buffer directly; when it writes its own layout (converted after), a binary add
  // reads the residual from the caller's buffer before it is overwritten.
  residual_ = fusion && fusion->residual_sum;
  sum_ = false;
  auto sums_in_dst = [&](const memory::desc& kernel_dst) {
    return residual_ && residual_in_dst && kernel_dst == dst_user;
  };
  const memory::desc residual_user = residual_md.data.ndims ? residual_md : memory::desc(dst, dt::f32, tag::nchw);
  if (fusion) {
    // Post-ops see the layouts just chosen.
    sum_ = sums_in_dst(fpd.dst_desc());
    auto fused_pd = [&] {
      return forward_pd(eng, g, bias, training, fpd.src_desc(), fpd.dst_desc(),
                        fusion_attr(fusion, fpd.dst_desc(), sum_), dnnl::algorithm::convolution_direct,
                        bf16_ && !training);
    };
    try {
      fpd = fused_pd();
    } catch (const dnnl::error&) {
      if (!sum_) throw;
      sum_ = false;  // no kernel with the sum: a binary add of a copy of the residual (below)
      fpd = fused_pd();
    }
    if (residual_ && !sum_) f_residual_.init(eng, residual_user, fpd.dst_desc(), 1.f, residual_in_dst);
  }
  algorithm_ = "direct";
  if (constant_weights_ && !training && (choice_.empty() || choice_ == "winograd") && !bf16_) {
    // Inference: time oneDNN's Winograd kernel (3x3, stride 1; its own blocked layouts,
    // converted at the edges) against the direct one and keep the faster, unless deploy
    // already chose.
    try {
      auto probe = forward_pd(eng, g, bias, false, src_any, dst_any, {}, dnnl::algorithm::convolution_winograd);
      const bool wino_sum = sums_in_dst(probe.dst_desc());
      auto wpd = forward_pd(eng, g, bias, false, probe.src_desc(), probe.dst_desc(),
                            fusion ? fusion_attr(fusion, probe.dst_desc(), wino_sum) : dnnl::primitive_attr(),
                            dnnl::algorithm::convolution_winograd);
      {  // its weights layout must be reachable from Caffe's (throws when not)
        memory from(wei_user, eng), to(wpd.weights_desc(), eng);
        make_reorder(from, to);
      }
      double direct = 1, wino = 0;
      if (choice_.empty()) {
        direct = time_forward(eng, fpd, src_user, dst_user, bias, residual_ && !sum_);
        wino = time_forward(eng, wpd, src_user, dst_user, bias, residual_ && !wino_sum);
        tuning_ = fmt::format(" (autotuned: {} {:.3f} ms vs {} {:.3f} ms)", wino < direct ? "winograd" : "direct",
                              std::min(wino, direct), wino < direct ? "direct" : "winograd", std::max(wino, direct));
      } else {
        tuning_ = " (winograd, as deploy chose)";
      }
      if (wino < direct) {
        algorithm_ = "winograd";
        fpd = wpd;
        sum_ = wino_sum;
        if (residual_ && !sum_) f_residual_.init(eng, residual_user, fpd.dst_desc(), 1.f, residual_in_dst);
      }
    } catch (const dnnl::error&) {
      // No Winograd kernel for this shape or ISA (oneDNN 2.6 has one for AVX-512 only): direct
      // it is, and the kernel's name says why nothing was timed.
      tuning_ = " (direct: oneDNN has no Winograd kernel for this layer on this CPU)";
    }
  }
  wino_.reset();
  if (constant_weights_ && !training && !bf16_ && (choice_.empty() || choice_ == "winograd_f4") &&
      try_own_winograd(eng, g, fpd, src_user, dst_user, fusion, residual_md))
    return;
  fwd_ = DnnlPrimitive(dnnl::convolution_forward(fpd), fpd);
  f_src_.init(eng, src_user, fpd.src_desc());
  f_wei_.init(eng, wei_user, fpd.weights_desc());
  f_dst_.init(eng, dst_user, fpd.dst_desc());
  if (bias) f_bias_.init(eng, bias_md, fpd.bias_desc());
  name_ = fpd.impl_info_str() + tuning_;
  if (fusion && fusion->any()) name_ += fmt::format(" (fused{})", fusion->describe());
  if (!training) return;

  // Backward kernels see the same layouts as the forward one.
  memory::desc src_b = fpd.src_desc(), dst_b = fpd.dst_desc();
  // oneDNN 2.6 on AVX2 has no JIT backward kernels for some of the forward's layouts (a plain
  // source, which a first layer with one channel keeps: LeNet's conv1 took 2.9 s a step in
  // reference loops for its weight gradient, against ~1 ms): where it would run reference
  // loops, it picks the layouts, converted from the forward's at each step.
  auto unless_reference = [](auto pd, auto alternative) {
    if (is_reference_impl(pd.impl_info_str())) {
      auto alt = alternative();
      if (!is_reference_impl(alt.impl_info_str())) return alt;
    }
    return pd;
  };
  if (need_bwd_data) {
    auto data_pd = [&](const memory::desc& s_md, const memory::desc& d_md) {
      dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, s_md, wei_any, d_md, strides, dil,
                                               pl, pr);
      return dnnl::convolution_backward_data::primitive_desc(bd, user_scratchpad(), eng, fpd);
    };
    auto bdpd = unless_reference(data_pd(src_b, dst_b), [&] { return data_pd(src_any, dst_any); });
    bwd_data_ = DnnlPrimitive(dnnl::convolution_backward_data(bdpd), bdpd);
    d_ddst_.init(eng, dst_user, bdpd.diff_dst_desc());
    d_wei_.init(eng, wei_user, bdpd.weights_desc());
    d_dsrc_.init(eng, src_user, bdpd.diff_src_desc());
    name_ += fmt::format(" / bwd_data {}", bdpd.impl_info_str());
  }

  auto weights_pd = [&](const memory::desc& s_md, const memory::desc& d_md) {
    auto wdesc = bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, s_md, wei_any,
                                                                 bias_md, d_md, strides, dil, pl, pr)
                      : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, s_md, wei_any,
                                                                 d_md, strides, dil, pl, pr);
    return dnnl::convolution_backward_weights::primitive_desc(wdesc, user_scratchpad(), eng, fpd);
  };
  auto wpd = unless_reference(weights_pd(src_b, dst_b), [&] { return weights_pd(src_any, dst_any); });
  bwd_wei_ = DnnlPrimitive(dnnl::convolution_backward_weights(wpd), wpd);
  w_src_.init(eng, src_user, wpd.src_desc());
  w_ddst_.init(eng, dst_user, wpd.diff_dst_desc());
  w_dwei_.init(eng, wei_user, wpd.diff_weights_desc());
  if (bias) w_dbias_.init(eng, bias_md, wpd.diff_bias_desc());
  oc_ = static_cast<size_t>(g.oc);
  name_ += fmt::format(" / bwd_weights {}", wpd.impl_info_str());
}

bool ConvKernels::try_own_winograd(dnnl::engine& eng, const ConvGeometry& g,
                                   const dnnl::convolution_forward::primitive_desc& fpd, const memory::desc& src_user,
                                   const memory::desc& dst_user, const FusedPostOps* fusion,
                                   const memory::desc& residual_md) {
  const WinogradShape ws{g.n, g.c, g.h, g.w, g.oc, g.oh, g.ow, g.ph, g.pw};
  const bool residual = fusion && fusion->residual_sum;
  if (!WinogradConv::applies(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.group, ws, src_user, dst_user) ||
      (residual && residual_md != dst_user))
    return false;
  const FusedPostOps post = fusion ? *fusion : FusedPostOps{};
  if (choice_.empty()) {
    const double theirs = time_forward(eng, fpd, src_user, dst_user, bias_, residual && !sum_);
    const double ours = time_own_winograd(ws, post);
    const std::string theirs_name = algorithm_ == "winograd" ? "winograd" : "direct";
    tuning_ = fmt::format(" (autotuned: {} {:.3f} ms vs {} {:.3f} ms)", ours < theirs ? "winograd_f4" : theirs_name,
                          std::min(ours, theirs), ours < theirs ? theirs_name : "winograd_f4", std::max(ours, theirs));
    if (ours >= theirs) return false;
  } else {
    tuning_ = " (as deploy chose)";
  }
  wino_ = std::make_unique<WinogradConv>(ws, post);
  algorithm_ = "winograd_f4";
  name_ = "bakusoku winograd F(4x4,3x3)" + tuning_;
  if (fusion && fusion->any()) name_ += fmt::format(" (fused{})", fusion->describe());
  return true;
}

void ConvKernels::forward(dnnl::stream& s, const void* src, const float* wei, const float* bias, void* dst,
                          const float* residual) {
  if (int8_) return int8_->run(s, src, wei, bias, dst, residual);
  if (wino_) {
    if (!wino_->has_weights()) wino_->set_weights(wei, bias_ ? bias : nullptr);
    wino_->forward(static_cast<const float*>(src), static_cast<float*>(dst), residual);
    return;
  }
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, f_src_.read(s, src)},
      {DNNL_ARG_WEIGHTS, constant_weights_ ? f_wei_.read_constant(s, wei) : f_wei_.read(s, wei)},
      {DNNL_ARG_DST, f_dst_.write(dst)}};
  if (bias_) args[DNNL_ARG_BIAS] = f_bias_.read(s, bias);
  if (residual_ && !sum_) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = f_residual_.read(s, residual);
  fwd_.execute(s, args);
  f_dst_.commit(s);
  s.wait();
}

void ConvKernels::backward_data(dnnl::stream& s, const float* diff_dst, const float* wei, float* diff_src) {
  bwd_data_.execute(s, {{DNNL_ARG_DIFF_DST, d_ddst_.read(s, diff_dst)},
                        {DNNL_ARG_WEIGHTS, d_wei_.read(s, wei)},
                        {DNNL_ARG_DIFF_SRC, d_dsrc_.write(diff_src)}});
  d_dsrc_.commit(s);
  s.wait();
}

void ConvKernels::backward_weights(dnnl::stream& s, const float* src, const float* diff_dst, float* diff_wei,
                                   float* diff_bias) {
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, w_src_.read(s, src)},
                                       {DNNL_ARG_DIFF_DST, w_ddst_.read(s, diff_dst)},
                                       {DNNL_ARG_DIFF_WEIGHTS, w_dwei_.write(diff_wei)}};
  // oneDNN computes the bias gradient with the weights; when it is not wanted it goes to a
  // scratch buffer.
  if (bias_) {
    if (!diff_bias) {
      scratch_bias_.resize(oc_);
      diff_bias = scratch_bias_.data();
    }
    args[DNNL_ARG_DIFF_BIAS] = w_dbias_.write(diff_bias);
  }
  bwd_wei_.execute(s, args);
  w_dwei_.commit(s);
  if (bias_) w_dbias_.commit(s);
  s.wait();
}

}  // namespace bks
