// Local response normalisation (ACROSS_CHANNELS, WITHIN_CHANNEL) on oneDNN, whose formula
// matches Caffe's: y = x * (k + alpha / n * sum(x^2))^-beta over the n-wide (or n x n) window.
#include "backend/dnnl_util.h"
#include "ops/lrn_attrs.h"
#include "ops/op.h"

namespace bks {

namespace {
constexpr const char* kRegions[] = {"ACROSS_CHANNELS", "WITHIN_CHANNEL"};
}

void LRNAttrs::visit(AttrVisitor& v) {
  v.field("local_size", local_size);
  v.field("alpha", alpha);
  v.field("beta", beta);
  v.field("k", k);
  v.field("region", region, kRegions);
}

namespace {

void lrn_from_caffe(const proto::LayerParameter& l, LRNAttrs& a, const std::string&) {
  const proto::LRNParameter& p = l.lrn_param();
  a.local_size = p.local_size();
  a.alpha = p.alpha();
  a.beta = p.beta();
  a.k = p.k();
  a.region = p.norm_region() == proto::LRNParameter::ACROSS_CHANNELS ? a.across_channels : a.within_channel;
}
void lrn_to_caffe(const LRNAttrs& a, proto::LayerParameter& l) {
  proto::LRNParameter* p = l.mutable_lrn_param();
  p->set_local_size(static_cast<uint32_t>(a.local_size));
  p->set_alpha(a.alpha);
  p->set_beta(a.beta);
  p->set_k(a.k);
  p->set_norm_region(a.region == a.across_channels ? proto::LRNParameter::ACROSS_CHANNELS
                                                   : proto::LRNParameter::WITHIN_CHANNEL);
}

class LRNDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const LRNAttrs& p = c.node.attrs.as<LRNAttrs>();
    if (p.local_size <= 0 || p.local_size % 2 == 0) c.fail("lrn_param.local_size must be odd, got {}", p.local_size);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.expect_ndim(in[0], 4, 4, "bottom");
    out[0] = in[0];
  }
  // Across channels, each output reads its neighbours.
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>&) const override {
    return n.attrs.as<LRNAttrs>().region == LRNAttrs::within_channel ? ChannelFlow::per_channel : ChannelFlow::blocks;
  }
};

class LRNKernel final : public Kernel {
 public:
  explicit LRNKernel(const OpInit& i) : Kernel(i), p_(i.node.attrs.as<LRNAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { shape_ = in[0]; }
  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    auto& be = static_cast<CpuBackend&>(backend_);
    auto md = plain_md(shape_);
    auto alg = p_.region == LRNAttrs::across_channels ? dnnl::algorithm::lrn_across_channels
                                                      : dnnl::algorithm::lrn_within_channel;
    bool training = phase_ == proto::TRAIN;
    // Caffe's WITHIN_CHANNEL divides alpha by n*n and fixes k at 1; oneDNN does the same
    // division for its within-channel algorithm.
    float k = p_.region == LRNAttrs::across_channels ? p_.k : 1.f;
    dnnl::lrn_forward::primitive_desc fpd(
        {training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, alg, md,
         static_cast<memory::dim>(p_.local_size), p_.alpha, p_.beta, k},
        user_scratchpad(), be.engine());
    fwd_ = DnnlPrimitive(dnnl::lrn_forward(fpd), fpd);
    src_ = memory(md, be.engine(), nullptr);
    dst_ = memory(md, be.engine(), nullptr);
    if (training) {
      ws_ = memory(fpd.workspace_desc(), be.engine());
      dnnl::lrn_backward::primitive_desc bpd(
          {alg, md, md, static_cast<memory::dim>(p_.local_size), p_.alpha, p_.beta, k}, user_scratchpad(), be.engine(),
          fpd);
      bwd_ = DnnlPrimitive(dnnl::lrn_backward(bpd), bpd);
      dsrc_ = memory(md, be.engine(), nullptr);
      ddst_ = memory(md, be.engine(), nullptr);
    }
    impl_ = fpd.impl_info_str();
  }
  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    src_.set_data_handle(const_cast<float*>(c.in[0]->f32()));
    dst_.set_data_handle(c.out[0]->f32());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    if (ws_) args[DNNL_ARG_WORKSPACE] = ws_;
    fwd_.execute(s, args);
    s.wait();
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    src_.set_data_handle(const_cast<float*>(c.in[0]->f32()));
    ddst_.set_data_handle(const_cast<float*>(c.out_grad[0]->f32()));
    dsrc_.set_data_handle(c.in_grad[0]->f32());
    bwd_.execute(
        s, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, ddst_}, {DNNL_ARG_DIFF_SRC, dsrc_}, {DNNL_ARG_WORKSPACE, ws_}});
    s.wait();
  }
  std::string kernel_name() const override { return "oneDNN " + impl_; }

 private:
  LRNAttrs p_;
  Shape shape_;
  DnnlPrimitive fwd_, bwd_;
  memory src_, dst_, ws_, dsrc_, ddst_;
  std::string impl_;  // what oneDNN runs
};

}  // namespace

BKS_REGISTER_ATTRS("LRN", LRNAttrs, lrn_from_caffe, lrn_to_caffe);
BKS_REGISTER_OP_DEF("LRN", LRNDef);
BKS_REGISTER_KERNEL("LRN", ::bks::DeviceKind::cpu, LRNKernel, "oneDNN", 10, nullptr);

}  // namespace bks
