// BN, the SegNet/ENet forks' batch normalisation with its own scale and shift (bn_param;
// alexgkendall/caffe-segnet and TimoSaemann/caffe-enet agree). Two learnable blobs, scale
// and shift, each (1, C, 1, 1); no running statistics are kept.
//  - LEARN: y = scale * (x - mean) / sqrt(var + 1e-9) + shift with the batch's mean and
//    biased variance per channel over (N, H, W), in either phase (the forks compute the
//    statistics for inference with a script that folds them into scale and shift);
//  - INFERENCE: y = scale * x + shift, which deploy folds into the convolution before it.
#include <cmath>
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kBNModes[] = {"LEARN", "INFERENCE"};
constexpr double kBNVarEps = 1e-9;  // the forks' var_eps_, fixed

struct BNAttrs final : AttrsOf<BNAttrs> {
  enum Mode { learn, inference };
  int mode = learn;
  FillerSpec scale_filler, shift_filler;  // Caffe's default filler: constant 0
  void visit(AttrVisitor& v) override {
    v.field("mode", mode, kBNModes);
    v.field("scale_filler", scale_filler);
    v.field("shift_filler", shift_filler);
  }
};

void bn_from_caffe(const proto::LayerParameter& l, BNAttrs& a, const std::string&) {
  const proto::BNParameter& p = l.bn_param();
  a.mode = p.bn_mode() == proto::BNParameter::INFERENCE ? a.inference : a.learn;
  if (p.has_scale_filler()) a.scale_filler = filler_from_caffe(p.scale_filler());
  if (p.has_shift_filler()) a.shift_filler = filler_from_caffe(p.shift_filler());
}
void bn_to_caffe(const BNAttrs& a, proto::LayerParameter& l) {
  proto::BNParameter* p = l.mutable_bn_param();
  p->set_bn_mode(a.mode == a.inference ? proto::BNParameter::INFERENCE : proto::BNParameter::LEARN);
  *p->mutable_scale_filler() = filler_to_caffe(a.scale_filler);
  *p->mutable_shift_filler() = filler_to_caffe(a.shift_filler);
}
BKS_REGISTER_ATTRS("BN", BNAttrs, bn_from_caffe, bn_to_caffe);

const BNAttrs& bn_attrs(const OpContext& c) {
  const BNAttrs& a = c.node.attrs.as<BNAttrs>();
  if (a.mode != a.learn && a.mode != a.inference) c.fail("bn_param.bn_mode must be LEARN or INFERENCE");
  return a;
}

class BNDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { bn_attrs(c); }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.expect_ndim(in[0], 4, 4, "bottom");
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const BNAttrs& a = bn_attrs(c);
    int64_t channels = in[0].at(1);
    return {{{1, channels, 1, 1}, a.scale_filler, true}, {{1, channels, 1, 1}, a.shift_filler, true}};
  }
  // LEARN keeps the normalised values itself, so it may run in place; INFERENCE reads x
  // for the scale's gradient.
  OpFacts facts(const OpContext& c, const std::vector<Shape>&) const override {
    OpFacts f;
    bool learn = bn_attrs(c).mode == BNAttrs::learn;
    f.allows_inplace = learn;
    f.backward_reads_input = !learn;
    return f;
  }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
  OpTraits traits(const Node& n) const override {
    OpTraits t;
    t.per_channel_affine = n.attrs.as<BNAttrs>().mode == BNAttrs::inference;
    return t;
  }
  bool channel_affine(const Node& n, const std::vector<const Tensor*>& blobs, int64_t channels, std::vector<double>& a,
                      std::vector<double>& b) const override {
    if (n.attrs.as<BNAttrs>().mode != BNAttrs::inference || blobs.size() != 2) return false;
    if (blobs[0]->numel() != channels || blobs[1]->numel() != channels) return false;
    a.assign(blobs[0]->f32(), blobs[0]->f32() + channels);
    b.assign(blobs[1]->f32(), blobs[1]->f32() + channels);
    return true;
  }
};

class BNKernel final : public Kernel {
 public:
  explicit BNKernel(const OpInit& i) : Kernel(i), learn_(bn_attrs(context()).mode == BNAttrs::learn) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    n_ = in[0][0];
    c_ = in[0][1];
    sp_ = in[0][2] * in[0][3];
    keep_ = learn_ && phase_ == proto::TRAIN;
    if (keep_) xhat_.reshape(in[0]);
    mean_.assign(c_, 0.f);
    inv_std_.assign(c_, 0.f);
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    const float* scale = c.params[0]->f32();
    const float* shift = c.params[1]->f32();
    if (learn_) statistics(x);
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const float* p = x + (b * c_ + k) * sp_;
        float* q = y + (b * c_ + k) * sp_;
        float* h = keep_ ? xhat_.f32() + (b * c_ + k) * sp_ : nullptr;
        const float s = scale[k], t = shift[k];
        if (!learn_) {
          for (int64_t i = 0; i < sp_; ++i) q[i] = s * p[i] + t;
          continue;
        }
        const float mu = mean_[k], is = inv_std_[k];
        for (int64_t i = 0; i < sp_; ++i) {
          float xn = (p[i] - mu) * is;
          if (h) h[i] = xn;
          q[i] = s * xn + t;
        }
      }
  }

  // d scale = sum(dy * x_norm) (INFERENCE: x), d shift = sum(dy); LEARN's dx is the
  // batch-statistics gradient: scale / std * (dy - mean(dy) - x_norm * mean(dy * x_norm)).
  void backward(OpCall& c) override {
    if (learn_ && !keep_) fail("backward needs a TRAIN-phase net");
    const float* dy = c.out_grad[0]->f32();
    const float* xn = learn_ ? xhat_.f32() : c.in[0]->f32();
    const float* scale = c.params[0]->f32();
    float* dscale = c.param_grad[0] ? c.param_grad[0]->f32() : nullptr;
    float* dshift = c.param_grad[1] ? c.param_grad[1]->f32() : nullptr;
    float* dx = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr;
    const double m = static_cast<double>(n_ * sp_);
#pragma omp parallel for
    for (int64_t k = 0; k < c_; ++k) {
      double sdy = 0, sdyx = 0;
      for (int64_t b = 0; b < n_; ++b) {
        int64_t o = (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) {
          sdy += dy[o + i];
          sdyx += static_cast<double>(dy[o + i]) * xn[o + i];
        }
      }
      if (dscale) dscale[k] = static_cast<float>(sdyx);
      if (dshift) dshift[k] = static_cast<float>(sdy);
      if (!dx) continue;
      const float s = scale[k];
      for (int64_t b = 0; b < n_; ++b) {
        int64_t o = (b * c_ + k) * sp_;
        if (!learn_) {
          for (int64_t i = 0; i < sp_; ++i) dx[o + i] = s * dy[o + i];
          continue;
        }
        const float mdy = static_cast<float>(sdy / m), mdyx = static_cast<float>(sdyx / m), g = s * inv_std_[k];
        for (int64_t i = 0; i < sp_; ++i) dx[o + i] = g * (dy[o + i] - mdy - xn[o + i] * mdyx);
      }
    }
  }

 private:
  // The batch's mean and biased variance per channel, over (N, H, W).
  void statistics(const float* x) {
    const double m = static_cast<double>(n_ * sp_);
#pragma omp parallel for
    for (int64_t k = 0; k < c_; ++k) {
      double s = 0, sq = 0;
      for (int64_t b = 0; b < n_; ++b) {
        const float* p = x + (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) s += p[i];
      }
      const double mu = s / m;
      for (int64_t b = 0; b < n_; ++b) {
        const float* p = x + (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) sq += (p[i] - mu) * (p[i] - mu);
      }
      mean_[k] = static_cast<float>(mu);
      inv_std_[k] = static_cast<float>(1.0 / std::sqrt(sq / m + kBNVarEps));
    }
  }

  bool learn_, keep_ = false;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
  Tensor xhat_;  // LEARN in TRAIN: the normalised input, for backward
  std::vector<float> mean_, inv_std_;
};

}  // namespace

BKS_REGISTER_OP_DEF("BN", BNDef);
BKS_REGISTER_KERNEL("BN", ::bks::DeviceKind::cpu, BNKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
