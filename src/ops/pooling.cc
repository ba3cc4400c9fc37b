// Pooling (MAX, AVE) with Caffe's geometry: ceil rounding by default, global_pooling.
// oneDNN runs every MAX pooling, and AVE pooling whenever its divisor rule coincides with
// Caffe's (no padding, or no window reaching past the padded input); otherwise a reference
// loop computes Caffe's exact averages.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "backend/dnnl_util.h"
#include "core/parallel.h"
#include "ops/op.h"
#include "ops/pooling_attrs.h"
#include "ops/pooling_plain.h"
#include "ops/pooling_blocked.h"
#include "ops/pooling_tiled.h"

namespace bks {

PoolWindow pool_window(const OpContext& c) {
  const PoolingAttrs& p = c.node.attrs.as<PoolingAttrs>();
  PoolWindow a;
  if (p.method == PoolingAttrs::stochastic) c.fail("STOCHASTIC pooling is not supported");
  if (p.method != PoolingAttrs::max && p.method != PoolingAttrs::ave) c.fail("unknown pooling method {}", p.method);
  a.global = p.global;
  auto pair = [&](const std::vector<int64_t>& v, const char* what, int64_t& h, int64_t& w) {
    if (v.size() != 2) c.fail("pooling_param: {} needs a height and a width", what);
    h = v[0];
    w = v[1];
    // Caffe's fields are 32-bit; the bound also keeps the output-size arithmetic from overflowing.
    if (h > INT32_MAX || w > INT32_MAX) c.fail("pooling_param: {} must be at most {}", what, INT32_MAX);
  };
  if (!a.global) {
    pair(p.kernel, "the kernel size", a.kh, a.kw);
    if (a.kh <= 0 || a.kw <= 0) c.fail("kernel size must be positive");
  } else if (!p.kernel.empty()) {
    c.fail("global_pooling takes no kernel size");
  }
  pair(p.pad, "pad", a.ph, a.pw);
  if (a.ph < 0 || a.pw < 0) c.fail("pad must not be negative");
  pair(p.stride, "stride", a.sh, a.sw);
  if (a.sh <= 0 || a.sw <= 0) c.fail("stride must be positive");
  if (a.global && (a.ph || a.pw || a.sh != 1 || a.sw != 1)) c.fail("global_pooling takes no pad and stride 1");
  a.max = p.method == PoolingAttrs::max;
  a.ceil = p.ceil;
  return a;
}

namespace {

constexpr const char* kPoolMethods[] = {"MAX", "AVE", "STOCHASTIC"};

void pooling_from_caffe(const proto::LayerParameter& l, PoolingAttrs& a, const std::string& where) {
  const proto::PoolingParameter& p = l.pooling_param();
  auto fail = [&](const char* m) { input_error("{}: {}", where, m); };
  a.method = static_cast<int>(p.pool());
  a.global = p.global_pooling();
  if (a.global) {
    if (p.has_kernel_size() || p.has_kernel_h() || p.has_kernel_w()) fail("global_pooling takes no kernel size");
    a.kernel.clear();
  } else if (p.has_kernel_size()) {
    if (p.has_kernel_h() || p.has_kernel_w()) fail("give kernel_size or kernel_h/kernel_w, not both");
    a.kernel = {p.kernel_size(), p.kernel_size()};
  } else if (p.has_kernel_h() && p.has_kernel_w()) {
    a.kernel = {p.kernel_h(), p.kernel_w()};
  } else {
    fail("pooling_param needs kernel_size or kernel_h and kernel_w");
  }
  if (p.has_pad_h() || p.has_pad_w())
    a.pad = {p.pad_h(), p.pad_w()};
  else
    a.pad = {p.pad(), p.pad()};
  if (p.has_stride_h() || p.has_stride_w())
    a.stride = {p.stride_h(), p.stride_w()};
  else
    a.stride = {p.stride(), p.stride()};
  a.ceil = p.round_mode() == proto::PoolingParameter::CEIL;
  // The forks' ceil_mode (true = CEIL) is another spelling of round_mode.
  if (p.has_ceil_mode()) {
    if (p.has_round_mode() && p.ceil_mode() != a.ceil)
      fail("pooling_param: ceil_mode and round_mode disagree (give one of them)");
    a.ceil = p.ceil_mode();
  }
}

void pooling_to_caffe(const PoolingAttrs& a, proto::LayerParameter& l) {
  proto::PoolingParameter* p = l.mutable_pooling_param();
  p->Clear();
  p->set_pool(static_cast<proto::PoolingParameter::PoolMethod>(a.method));
  if (a.global) p->set_global_pooling(true);
  auto put = [](const std::vector<int64_t>& v, auto set_one, auto set_h, auto set_w) {
    if (v.size() != 2) return;
    if (v[0] == v[1]) {
      set_one(static_cast<uint32_t>(v[0]));
    } else {
      set_h(static_cast<uint32_t>(v[0]));
      set_w(static_cast<uint32_t>(v[1]));
    }
  };
  put(
      a.kernel, [&](uint32_t x) { p->set_kernel_size(x); }, [&](uint32_t x) { p->set_kernel_h(x); },
      [&](uint32_t x) { p->set_kernel_w(x); });
  put(
      a.stride, [&](uint32_t x) { p->set_stride(x); }, [&](uint32_t x) { p->set_stride_h(x); },
      [&](uint32_t x) { p->set_stride_w(x); });
  put(
      a.pad, [&](uint32_t x) { p->set_pad(x); }, [&](uint32_t x) { p->set_pad_h(x); },
      [&](uint32_t x) { p->set_pad_w(x); });
  p->set_round_mode(a.ceil ? proto::PoolingParameter::CEIL : proto::PoolingParameter::FLOOR);
}

// Output extent of one spatial axis, with Caffe's rounding.
int64_t pool_out_size(const PoolWindow& a, int64_t in, int64_t k, int64_t s, int64_t p) {
  int64_t o;
  if (a.ceil)
    o = static_cast<int64_t>(std::ceil(static_cast<double>(in + 2 * p - k) / s)) + 1;
  else
    o = (in + 2 * p - k) / s + 1;
  // Caffe: the last window must start inside the input or its left padding.
  if (p > 0 && (o - 1) * s >= in + p) --o;
  return o;
}

// The geometry for a 4-d input: its extents, the window (global pooling: the whole plane)
// and the output's spatial extents. InputError when the window does not fit.
struct PoolGeometry {
  int64_t n, c, h, w, kh, kw, oh, ow;
};

PoolGeometry pool_geometry(const OpContext& c, const PoolWindow& a, const Shape& in) {
  c.expect_ndim(in, 4, 4, "bottom");
  PoolGeometry g{in[0], in[1], in[2], in[3], a.kh, a.kw, 0, 0};
  if (a.global) {
    g.kh = g.h;
    g.kw = g.w;
  }
  if (a.ph >= g.kh || a.pw >= g.kw) c.fail("pad must be smaller than the kernel");
  g.oh = pool_out_size(a, g.h, g.kh, a.sh, a.ph);
  g.ow = pool_out_size(a, g.w, g.kw, a.sw, a.pw);
  if (g.oh <= 0 || g.ow <= 0) c.fail("kernel {}x{} does not fit the {}x{} input", g.kh, g.kw, g.h, g.w);
  return g;
}

class PoolingDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  // A second top is the argmax mask (the SegNet/ENet forks' Upsample reads it).
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    PoolWindow a = pool_window(c);
    if (c.node.outputs.size() > 1 && !a.max) c.fail("a second top (the argmax mask) needs pool: MAX");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    PoolGeometry g = pool_geometry(c, pool_window(c), in[0]);
    for (Shape& s : out) s = {g.n, g.c, g.oh, g.ow};
  }
  // Max pooling keeps the winners' positions (oneDNN's workspace or our argmax), average
  // pooling needs nothing: backward never reads the input, so it may be freed early.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
  OpTraits traits(const Node& n) const override {
    OpTraits t;
    t.max_pooling = n.attrs.as<PoolingAttrs>().method == PoolingAttrs::max;
    t.averages_int8 = n.attrs.as<PoolingAttrs>().method == PoolingAttrs::ave && n.outputs.size() == 1;
    t.passes_bf16 = true;
    return t;
  }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
};

class PoolingKernel final : public Kernel {
 public:
  explicit PoolingKernel(const OpInit& init)
      : Kernel(init),
        attrs_(pool_window(context())),
        max_(attrs_.max),
        sh_(attrs_.sh),
        sw_(attrs_.sw),
        ph_(attrs_.ph),
        pw_(attrs_.pw) {
    int8_threshold_ = context().node.deploy.int8_input_threshold;
    if (int8_threshold_ < 0.f) fail("int8_input_threshold must be positive");
    const bool average = context().node.attrs.as<PoolingAttrs>().method == PoolingAttrs::ave;
    if (int8_threshold_ > 0.f && (!average || phase_ == proto::TRAIN))
      fail("int8_input_threshold is for AVE pooling in an inference graph");
  }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    PoolGeometry g = pool_geometry(context(), attrs_, in[0]);
    n_ = g.n;
    c_ = g.c;
    h_ = g.h;
    w_ = g.w;
    kh_ = g.kh;
    kw_ = g.kw;
    oh_ = g.oh;
    ow_ = g.ow;
    choose_algorithm();
  }

  LayoutRule layout_rule() const override { return LayoutRule::any_in_any_out; }
  dnnl::memory::desc preferred_output_layout(int, const std::vector<dnnl::memory::desc>& in) override {
    Shape s{n_, c_, h_, w_};
    memory::desc src = in.empty() || in[0].data.ndims == 0 ? plain_md(s) : in[0];
    if (is_int8(src)) return dequantizes(src) ? nhwc_md({n_, c_, oh_, ow_}) : forward_pd(src).dst_desc();
    if (src == nhwc_md(s) || own_tiled_kernel(src)) return nhwc_md({n_, c_, oh_, ow_});
    if (own_plain_kernel(src)) return plain_md({n_, c_, oh_, ow_});
    if (own_blocked_kernel(src)) return blocked_md({n_, c_, oh_, ow_}, channel_block(src));
    return use_dnnl_ ? forward_pd(src).dst_desc() : memory::desc();
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    auto& be = static_cast<CpuBackend&>(backend_);
    memory::desc src = in_md(0, in[0]), dst_user = out_md(0, out[0]);
    int8_src_ = dequantizes(src);
    if (int8_src_) {
      // bakusoku's own kernel: means of int8 levels, dequantized once per output.
      channels_last_ = plain_ = tiled_ = false;
      blocked_ = 0;
      src_q_.init(be.engine(), src, memory::desc(to_dims(in[0]), src.data_type(), memory::format_tag::nhwc));
      dst_.init(be.engine(), dst_user, nhwc_md(out[0]));
      signed_src_ = src.data_type() == memory::data_type::s8;
      dequant_ = int8_threshold_ / int8_levels(src.data_type());
      impl_ = fmt::format("bakusoku channels-last average ({} in |x| <= {:.4g}, f32 out)", signed_src_ ? "s8" : "u8",
                          int8_threshold_);
      return;
    }
    if (is_int8(src) && (!use_dnnl_ || phase_ == proto::TRAIN))
      fail("int8 input needs MAX pooling (or AVE without padding) in an inference graph");
    channels_last_ = !is_int8(src) && (src == nhwc_md(in[0]) || own_tiled_kernel(src));
    if (channels_last_) {
      // bakusoku's own kernel: Caffe's exact semantics, vectorised over channels.
      memory::desc dst_nhwc = nhwc_md(out[0]);
      dst_.init(be.engine(), dst_user, dst_nhwc);
      ddst_.init(be.engine(), dst_user, dst_nhwc);
      if (max_ && phase_ == proto::TRAIN) argmax_.reshape(out[0], 0);
      src_block_ = channel_block(src);
      tiled_ = windows_tile() && pool_tiled_applies(c_, src_block_);
      impl_ = fmt::format("bakusoku channels-last {}{}", max_ ? "max" : "average",
                          !tiled_      ? ""
                          : src_block_ ? fmt::format(" (tiled windows, from nChw{}c)", src_block_)
                                       : " (tiled windows)");
      return;
    }
    blocked_ = own_blocked_kernel(src) ? channel_block(src) : 0;
    if (blocked_) {
      dst_.init(be.engine(), dst_user, blocked_md(out[0], blocked_));
      impl_ = fmt::format("bakusoku nChw{}c max", blocked_);
      return;
    }
    plain_ = own_plain_kernel(src);
    if (plain_) {
      dst_.init(be.engine(), dst_user, plain_md(out[0]));
      impl_ = fmt::format("bakusoku plain {}", max_ ? "max" : "average");
      return;
    }
    if (!use_dnnl_) {
      // The reference loop works on plain NCHW; other layouts convert at the edges.
      src_plain_.init(be.engine(), src, plain_md(in[0]));
      dst_.init(be.engine(), dst_user, plain_md(out[0]));
      ddst_.init(be.engine(), dst_user, plain_md(out[0]));
      dsrc_plain_.init(be.engine(), src, plain_md(in[0]));
      impl_ = "reference (Caffe AVE divisor with padding and ceil overhang)";
      return;
    }
    auto fpd = forward_pd(src);
    fwd_ = DnnlPrimitive(dnnl::pooling_forward(fpd), fpd);
    src_m_ = memory(src, be.engine(), nullptr);
    dst_.init(be.engine(), dst_user, fpd.dst_desc());
    bool training = phase_ == proto::TRAIN;
    if (training && max_) ws_ = memory(fpd.workspace_desc(), be.engine());
    impl_ = fpd.impl_info_str();
    if (training) {
      dnnl::pooling_backward::primitive_desc bpd({alg_, src, fpd.dst_desc(), strides_, kernel_, pl_, pr_},
                                                 user_scratchpad(), be.engine(), fpd);
      bwd_ = DnnlPrimitive(dnnl::pooling_backward(bpd), bpd);
      ddst_.init(be.engine(), dst_user, bpd.diff_dst_desc());
    }
  }

  void forward(OpCall& c) override {
    if (int8_src_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      const void* x = src_q_.read(s, c.in[0]->raw()).get_data_handle();
      s.wait();
      float* y = static_cast<float*>(dst_.write(c.out[0]->f32()).get_data_handle());
      if (signed_src_)
        nhwc_levels_forward(static_cast<const int8_t*>(x), y);
      else
        nhwc_levels_forward(static_cast<const uint8_t*>(x), y);
      dst_.commit(s);
      s.wait();
      return;
    }
    if (channels_last_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      float* y = static_cast<float*>(dst_.write(c.out[0]->f32()).get_data_handle());
      nhwc_forward(c.in[0]->f32(), y);
      dst_.commit(s);
      s.wait();
      return;
    }
    if (blocked_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      pool_blocked_max_forward({n_, c_, h_, w_, oh_, ow_, kh_, kw_, sh_, sw_, ph_, pw_, blocked_}, c.in[0]->f32(),
                               static_cast<float*>(dst_.write(c.out[0]->f32()).get_data_handle()));
      dst_.commit(s);
      s.wait();
      return;
    }
    if (plain_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      pool_plain_forward(plain_geometry(), c.in[0]->f32(),
                         static_cast<float*>(dst_.write(c.out[0]->f32()).get_data_handle()));
      dst_.commit(s);
      s.wait();
      return;
    }
    if (!use_dnnl_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      const float* x = static_cast<const float*>(src_plain_.read(s, c.in[0]->f32()).get_data_handle());
      s.wait();
      ave_forward(x, static_cast<float*>(dst_.write(c.out[0]->f32()).get_data_handle()));
      dst_.commit(s);
      s.wait();
      return;
    }
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    src_m_.set_data_handle(const_cast<void*>(c.in[0]->raw()));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_m_}, {DNNL_ARG_DST, dst_.write(c.out[0]->raw())}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    fwd_.execute(s, args);
    dst_.commit(s);
    s.wait();
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    if (channels_last_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      const float* dy = static_cast<const float*>(ddst_.read(s, c.out_grad[0]->f32()).get_data_handle());
      s.wait();
      return nhwc_backward(dy, c.in_grad[0]->f32());
    }
    if (!use_dnnl_) {
      auto& s = static_cast<CpuBackend&>(backend_).stream();
      const float* dy = static_cast<const float*>(ddst_.read(s, c.out_grad[0]->f32()).get_data_handle());
      s.wait();
      ave_backward(dy, static_cast<float*>(dsrc_plain_.write(c.in_grad[0]->f32()).get_data_handle()));
      dsrc_plain_.commit(s);
      s.wait();
      return;
    }
    if (phase_ != proto::TRAIN) fail("backward needs a TRAIN-phase net");
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    src_m_.set_data_handle(c.in_grad[0]->f32());
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, ddst_.read(s, c.out_grad[0]->f32())},
                                         {DNNL_ARG_DIFF_SRC, src_m_}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    bwd_.execute(s, args);
    s.wait();
  }

  std::string kernel_name() const override {
    return use_dnnl_ && !int8_src_ && !channels_last_ && !plain_ && !blocked_ ? "oneDNN " + impl_ : impl_;
  }

 private:
  // oneDNN runs MAX always and AVE when its divisor rule equals Caffe's.
  void choose_algorithm() {
    int64_t prh = (oh_ - 1) * sh_ + kh_ - h_ - ph_, prw = (ow_ - 1) * sw_ + kw_ - w_ - pw_;
    bool overhang = prh > ph_ || prw > pw_;
    use_dnnl_ = true;
    if (max_)
      alg_ = dnnl::algorithm::pooling_max;
    else if (ph_ == 0 && pw_ == 0)
      alg_ = dnnl::algorithm::pooling_avg_exclude_padding;
    else if (!overhang)
      alg_ = dnnl::algorithm::pooling_avg_include_padding;
    else
      use_dnnl_ = false;
    strides_ = {sh_, sw_};
    kernel_ = {kh_, kw_};
    pl_ = {ph_, pw_};
    pr_ = {std::max<int64_t>(prh, 0), std::max<int64_t>(prw, 0)};
  }

  // int8 input (between int8 layers): int8 output of the same type, with the same scale
  // (a maximum of levels is the level of the maximum).
  dnnl::pooling_forward::primitive_desc forward_pd(const memory::desc& src) {
    auto prop = phase_ == proto::TRAIN ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    memory::desc dst_any({n_, c_, oh_, ow_}, src.data_type(), memory::format_tag::any);
    return dnnl::pooling_forward::primitive_desc({prop, alg_, src, dst_any, strides_, kernel_, pl_, pr_},
                                                 user_scratchpad(), static_cast<CpuBackend&>(backend_).engine());
  }

  static memory::desc nhwc_md(const Shape& s) {
    return memory::desc(to_dims(s), memory::data_type::f32, memory::format_tag::nhwc);
  }

  // Window bounds of output (oy, ox): [h0, h1) x [w0, w1) inside the input, and Caffe's
  // average divisor (padding counts, ceil overhang does not).
  struct Window {
    int64_t h0, h1, w0, w1;
    float size;
  };
  Window window(int64_t oy, int64_t ox) const {
    int64_t hs = oy * sh_ - ph_, ws = ox * sw_ - pw_;
    int64_t he = std::min(hs + kh_, h_ + ph_), we = std::min(ws + kw_, w_ + pw_);
    float size = static_cast<float>((he - hs) * (we - ws));
    return {std::max<int64_t>(hs, 0), std::min(he, h_), std::max<int64_t>(ws, 0), std::min(we, w_), size};
  }

  // Channels-last pooling: each window position is a contiguous run of C floats, so the
  // inner loops vectorise over channels.
  void nhwc_forward(const float* x, float* y) {
    int32_t* arg = max_ && phase_ == proto::TRAIN ? argmax_.data<int32_t>() : nullptr;
    if (tiled_) return pool_tiled_max_forward(tiling(), x, y, arg);
    const int64_t C = c_;
#pragma omp parallel for collapse(2) if (worth_threads())
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t oy = 0; oy < oh_; ++oy)
        for (int64_t ox = 0; ox < ow_; ++ox) {
          Window wd = window(oy, ox);
          const float* xn = x + n * h_ * w_ * C;
          float* out = y + ((n * oh_ + oy) * ow_ + ox) * C;
          int32_t* a = arg ? arg + ((n * oh_ + oy) * ow_ + ox) * C : nullptr;
          if (max_ && a)
            max_window_arg(xn, wd, out, a);
          else if (max_)
            max_window(xn, wd, out);
          else
            ave_window(xn, wd, out);
        }
  }

  // One output position: the window's rows are runs of (w1 - w0) * C contiguous floats.
  void max_window_arg(const float* xn, const Window& wd, float* __restrict out, int32_t* __restrict a) const {
    const int64_t C = c_;
    const float* first = xn + (wd.h0 * w_ + wd.w0) * C;
    int32_t first_pos = static_cast<int32_t>(wd.h0 * w_ + wd.w0);
#pragma omp simd
    for (int64_t k = 0; k < C; ++k) {
      out[k] = first[k];
      a[k] = first_pos;
    }
    for (int64_t i = wd.h0; i < wd.h1; ++i)
      for (int64_t j = (i == wd.h0 ? wd.w0 + 1 : wd.w0); j < wd.w1; ++j) {
        const float* p = xn + (i * w_ + j) * C;
        int32_t pos = static_cast<int32_t>(i * w_ + j);
#pragma omp simd
        for (int64_t k = 0; k < C; ++k) {
          bool better = p[k] > out[k];  // strict: the first maximum wins, as in Caffe
          out[k] = better ? p[k] : out[k];
          a[k] = better ? pos : a[k];
        }
      }
  }

  void max_window(const float* xn, const Window& wd, float* __restrict out) const {
    const int64_t C = c_;
    const float* first = xn + (wd.h0 * w_ + wd.w0) * C;
#pragma omp simd
    for (int64_t k = 0; k < C; ++k) out[k] = first[k];
    for (int64_t i = wd.h0; i < wd.h1; ++i)
      for (int64_t j = wd.w0; j < wd.w1; ++j) {
        const float* p = xn + (i * w_ + j) * C;
#pragma omp simd
        for (int64_t k = 0; k < C; ++k) out[k] = std::max(out[k], p[k]);
      }
  }

  // The window's mean times `scale`, of f32 values or of int8 levels (sums of up to 2^16
  // levels are exact in f32).
  template <class T>
  void ave_window(const T* xn, const Window& wd, float* __restrict out, float scale = 1.f) const {
    const int64_t C = c_;
#pragma omp simd
    for (int64_t k = 0; k < C; ++k) out[k] = 0.f;
    for (int64_t i = wd.h0; i < wd.h1; ++i)
      for (int64_t j = wd.w0; j < wd.w1; ++j) {
        const T* p = xn + (i * w_ + j) * C;
#pragma omp simd
        for (int64_t k = 0; k < C; ++k) out[k] += static_cast<float>(p[k]);
      }
    const float f = scale / wd.size;
#pragma omp simd
    for (int64_t k = 0; k < C; ++k) out[k] *= f;
  }

  // Average pooling of int8 levels (channels-last), each output dequantized once.
  template <class Q>
  void nhwc_levels_forward(const Q* x, float* y) const {
    const int64_t C = c_;
#pragma omp parallel for collapse(2) if (worth_threads())
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t oy = 0; oy < oh_; ++oy)
        for (int64_t ox = 0; ox < ow_; ++ox)
          ave_window(x + n * h_ * w_ * C, window(oy, ox), y + ((n * oh_ + oy) * ow_ + ox) * C, dequant_);
  }

  void nhwc_backward(const float* dy, float* dx) {
    if (tiled_) return pool_tiled_max_backward(tiling(), dy, argmax_.data<int32_t>(), dx);
    const int64_t C = c_;
    // One image per thread: windows overlap within an image, never across images.
#pragma omp parallel for if (worth_threads())
    for (int64_t n = 0; n < n_; ++n) {
      float* dxn = dx + n * h_ * w_ * C;
      std::fill_n(dxn, h_ * w_ * C, 0.f);
      for (int64_t oy = 0; oy < oh_; ++oy)
        for (int64_t ox = 0; ox < ow_; ++ox) {
          int64_t o = ((n * oh_ + oy) * ow_ + ox) * C;
          const float* g = dy + o;
          if (max_) {
            const int32_t* a = argmax_.data<int32_t>() + o;
            for (int64_t k = 0; k < C; ++k) dxn[a[k] * C + k] += g[k];
          } else {
            Window wd = window(oy, ox);
            float inv = 1.f / wd.size;
            for (int64_t i = wd.h0; i < wd.h1; ++i)
              for (int64_t j = wd.w0; j < wd.w1; ++j) {
                float* p = dxn + (i * w_ + j) * C;
#pragma omp simd
                for (int64_t k = 0; k < C; ++k) p[k] += g[k] * inv;
              }
          }
        }
    }
  }

  // An int8 input that deploy gave this average pooling the threshold of.
  bool dequantizes(const memory::desc& src) const { return is_int8(src) && int8_threshold_ > 0.f && !max_; }
  // Small inputs (batch-1 inference) run serially: a parallel region costs more there.
  bool worth_threads() const { return n_ * c_ * h_ * w_ >= kSerialBelow; }
  PoolTiling tiling() const { return {n_, c_, oh_, ow_, kh_, kw_, src_block_}; }
  bool windows_tile() const {
    return max_ && ph_ == 0 && pw_ == 0 && sh_ == kh_ && sw_ == kw_ && oh_ * kh_ == h_ && ow_ * kw_ == w_;
  }
  // 16 or 8 for oneDNN's nChw16c / nChw8c, else 0.
  int64_t channel_block(const memory::desc& src) const {
    memory::dims d{n_, c_, h_, w_};
    if (src == memory::desc(d, memory::data_type::f32, memory::format_tag::nChw16c)) return 16;
    if (src == memory::desc(d, memory::data_type::f32, memory::format_tag::nChw8c)) return 8;
    return 0;
  }
  // A channel-blocked input (a first-layer convolution's) that the tiled kernel reads
  // directly, writing channels-last.
  bool own_tiled_kernel(const memory::desc& src) const {
    int64_t b = channel_block(src);
    return b && windows_tile() && pool_tiled_applies(c_, b);
  }

  // Inference max pooling on a channel-blocked input (pooling_blocked.h), in its layout.
  bool own_blocked_kernel(const memory::desc& src) const {
    return phase_ == proto::TEST && max_ && channel_block(src) != 0;
  }
  static memory::desc blocked_md(const Shape& s, int64_t block) {
    return memory::desc(to_dims(s), memory::data_type::f32,
                        block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c);
  }

  // Inference on plain NCHW data: oneDNN 2.6 has only its reference kernel there.
  bool own_plain_kernel(const memory::desc& src) const {
    return phase_ == proto::TEST && src == plain_md({n_, c_, h_, w_});
  }
  PoolPlainGeometry plain_geometry() const { return {n_ * c_, h_, w_, oh_, ow_, kh_, kw_, sh_, sw_, ph_, pw_, max_}; }

  // The reference AVE path on plain NCHW data (Caffe's divisor, see window()).
  template <class F>
  void for_windows(F&& f) const {
#pragma omp parallel for if (worth_threads())
    for (int64_t nc = 0; nc < n_ * c_; ++nc)
      for (int64_t y = 0; y < oh_; ++y)
        for (int64_t x = 0; x < ow_; ++x) f(nc, y * ow_ + x, window(y, x));
  }
  void ave_forward(const float* x, float* y) const { pool_plain_forward(plain_geometry(), x, y); }
  void ave_backward(const float* dy, float* dx) const {
    std::fill_n(dx, n_ * c_ * h_ * w_, 0.f);
    // Windows of one (n, c) plane are visited by one thread, so the += below never races.
    for_windows([&](int64_t nc, int64_t o, const Window& wd) {
      float g = dy[nc * oh_ * ow_ + o] / wd.size;
      float* p = dx + nc * h_ * w_;
      for (int64_t i = wd.h0; i < wd.h1; ++i)
        for (int64_t j = wd.w0; j < wd.w1; ++j) p[i * w_ + j] += g;
    });
  }

  PoolWindow attrs_;
  bool max_ = true, use_dnnl_ = true, channels_last_ = false;
  bool plain_ = false;  // bakusoku's plain NCHW inference kernel (pooling_plain.h)
  int64_t blocked_ = 0;  // 8 / 16: bakusoku's nChw8c / nChw16c inference max kernel (pooling_blocked.h)
  bool tiled_ = false;     // max pooling whose windows tile the input (see pooling_tiled.h)
  int64_t src_block_ = 0;  // the tiled kernel's input: 0 NHWC, 8/16 nChw8c/nChw16c
  Tensor argmax_{Shape{0}, DType::s32};
  float int8_threshold_ = 0.f;  // deploy.int8_input_threshold: |x| an int8 input's top level stands for
  bool int8_src_ = false, signed_src_ = false;
  float dequant_ = 1.f;  // one level of the int8 input, in its units
  int64_t kh_ = 0, kw_ = 0, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  DnnlPrimitive fwd_, bwd_;
  dnnl::algorithm alg_ = dnnl::algorithm::pooling_max;
  memory::dims strides_, kernel_, pl_, pr_;
  memory src_m_, ws_;
  DnnlOperand dst_, ddst_, src_plain_, dsrc_plain_, src_q_;
  std::string impl_;  // what runs, for kernel_name()
};

}  // namespace

void PoolingAttrs::visit(AttrVisitor& v) {
  v.field("method", method, kPoolMethods);
  v.field("global", global);
  v.field("kernel", kernel);
  v.field("stride", stride);
  v.field("pad", pad);
  v.field("ceil", ceil);
}

BKS_REGISTER_ATTRS("Pooling", PoolingAttrs, pooling_from_caffe, pooling_to_caffe);
BKS_REGISTER_OP_DEF("Pooling", PoolingDef);
// The mask top is the reference kernel's (the float index of each winner in its plane).
static bool pooling_without_mask(const OpInit& i) { return i.node.outputs.size() == 1; }
BKS_REGISTER_KERNEL("Pooling", ::bks::DeviceKind::cpu, PoolingKernel, "oneDNN", 10, pooling_without_mask);

}  // namespace bks
