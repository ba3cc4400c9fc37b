// PReLU: y = max(0, x) + a_c * min(0, x) with a learned slope per channel (or one shared).
#include "ops/op.h"

namespace bks {
namespace {

struct PReLUAttrs final : AttrsOf<PReLUAttrs> {
  FillerSpec filler;  // of the slopes (Caffe's default for PReLU: constant 0.25)
  bool channel_shared = false;
  PReLUAttrs() { filler.value = 0.25f; }
  void visit(AttrVisitor& v) override {
    v.field("filler", filler);
    v.field("channel_shared", channel_shared);
  }
};
void prelu_from_caffe(const proto::LayerParameter& l, PReLUAttrs& a, const std::string&) {
  const proto::PReLUParameter& p = l.prelu_param();
  if (p.has_filler()) a.filler = filler_from_caffe(p.filler());
  a.channel_shared = p.channel_shared();
}
void prelu_to_caffe(const PReLUAttrs& a, proto::LayerParameter& l) {
  proto::PReLUParameter* p = l.mutable_prelu_param();
  *p->mutable_filler() = filler_to_caffe(a.filler);
  p->set_channel_shared(a.channel_shared);
}
BKS_REGISTER_ATTRS("PReLU", PReLUAttrs, prelu_from_caffe, prelu_to_caffe);

class PReLUDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.split_channels(in[0]);
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const PReLUAttrs& a = c.node.attrs.as<PReLUAttrs>();
    return {{{a.channel_shared ? 1 : c.split_channels(in[0]).c}, a.filler, true}};
  }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
};

class PReLUKernel final : public Kernel {
 public:
  explicit PReLUKernel(const OpInit& i) : Kernel(i), shared_(i.node.attrs.as<PReLUAttrs>().channel_shared) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    auto [n, c, sp] = split_channels(in[0]);
    n_ = n;
    c_ = c;
    sp_ = sp;
  }
  float slope(const float* a, int64_t k) const { return shared_ ? a[0] : a[k]; }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* a = c.params[0]->f32();
    float* y = c.out[0]->f32();
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        float s = slope(a, k);
        int64_t o = (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) y[o + i] = x[o + i] > 0.f ? x[o + i] : s * x[o + i];
      }
  }
  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* a = c.params[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) {
      float* da = c.param_grad[0]->f32();
      c.param_grad[0]->zero();
      for (int64_t b = 0; b < n_; ++b)
        for (int64_t k = 0; k < c_; ++k) {
          int64_t o = (b * c_ + k) * sp_;
          double acc = 0;
          for (int64_t i = 0; i < sp_; ++i) acc += x[o + i] > 0.f ? 0.0 : static_cast<double>(dy[o + i]) * x[o + i];
          da[shared_ ? 0 : k] += static_cast<float>(acc);
        }
    }
    if (c.in_grad[0]) {
      float* dx = c.in_grad[0]->f32();
      for (int64_t b = 0; b < n_; ++b)
        for (int64_t k = 0; k < c_; ++k) {
          float s = slope(a, k);
          int64_t o = (b * c_ + k) * sp_;
          for (int64_t i = 0; i < sp_; ++i) dx[o + i] = x[o + i] > 0.f ? dy[o + i] : s * dy[o + i];
        }
    }
  }

 private:
  bool shared_;  // one slope for all channels
  int64_t n_ = 0, c_ = 0, sp_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("PReLU", PReLUDef);
BKS_REGISTER_KERNEL("PReLU", ::bks::DeviceKind::cpu, PReLUKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
