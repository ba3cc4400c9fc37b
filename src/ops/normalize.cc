// Normalize (the SSD fork's norm_param): L2-normalises each sample (across_spatial) or
// each spatial position across channels, then multiplies by a learned scale (one, or one
// per channel): y = s[c] * x / sqrt(sum x^2 + eps), the sum over the normalised group.
//
// The gradient is the exact one. The fork's backward drops the per-channel scales from
// the dot product it subtracts (right only when all scales are equal) and divides the
// scale gradient by the scale; both differ here on purpose (finite differences agree).
#include <cmath>

#include "ops/op.h"

namespace bks {
namespace {

struct NormalizeAttrs final : AttrsOf<NormalizeAttrs> {
  bool across_spatial = true;
  bool channel_shared = true;
  float eps = 1e-10f;
  FillerSpec scale_filler;  // the fork's default: constant 1
  NormalizeAttrs() { scale_filler.value = 1.f; }
  void visit(AttrVisitor& v) override {
    v.field("across_spatial", across_spatial);
    v.field("channel_shared", channel_shared);
    v.field("eps", eps);
    v.field("scale_filler", scale_filler);
  }
};
void normalize_from_caffe(const proto::LayerParameter& l, NormalizeAttrs& a, const std::string&) {
  const proto::NormalizeParameter& p = l.norm_param();
  a.across_spatial = p.across_spatial();
  a.channel_shared = p.channel_shared();
  a.eps = p.eps();
  if (p.has_scale_filler()) a.scale_filler = filler_from_caffe(p.scale_filler());
}
void normalize_to_caffe(const NormalizeAttrs& a, proto::LayerParameter& l) {
  proto::NormalizeParameter* p = l.mutable_norm_param();
  p->set_across_spatial(a.across_spatial);
  p->set_channel_shared(a.channel_shared);
  p->set_eps(a.eps);
  *p->mutable_scale_filler() = filler_to_caffe(a.scale_filler);
}
BKS_REGISTER_ATTRS("Normalize", NormalizeAttrs, normalize_from_caffe, normalize_to_caffe);

class NormalizeDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const float eps = c.node.attrs.as<NormalizeAttrs>().eps;
    if (!(eps >= 0.f)) c.fail("norm_param.eps must be non-negative, got {}", eps);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.split_channels(in[0]);
    out[0] = in[0];
  }
  // The scale: one value (the fork's blob has no axes; it reads as one value) or one per channel.
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const NormalizeAttrs& a = c.node.attrs.as<NormalizeAttrs>();
    return {{{a.channel_shared ? 1 : c.split_channels(in[0]).c}, a.scale_filler, true}};
  }
};

class NormalizeKernel final : public Kernel {
 public:
  explicit NormalizeKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<NormalizeAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    auto [n, c, sp] = split_channels(in[0]);
    n_ = n;
    c_ = c;
    sp_ = sp;
    groups_ = a_.across_spatial ? 1 : sp_;  // norms per sample
    norm_.assign(static_cast<size_t>(n_ * groups_), 0.0);
    dot_.assign(norm_.size(), 0.0);
  }
  // Norm group of element (channel k, position i) within a sample.
  int64_t group(int64_t i) const { return a_.across_spatial ? 0 : i; }
  float scale(const float* s, int64_t k) const { return a_.channel_shared ? s[0] : s[k]; }

  // norm_[b * groups_ + g] = sqrt(sum of x^2 over the group + eps).
  void compute_norms(const float* x) {
    std::fill(norm_.begin(), norm_.end(), 0.0);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const float* px = x + (b * c_ + k) * sp_;
        double* nb = norm_.data() + b * groups_;
        for (int64_t i = 0; i < sp_; ++i) nb[group(i)] += static_cast<double>(px[i]) * px[i];
      }
    for (double& v : norm_) v = std::sqrt(v + a_.eps);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* s = c.params[0]->f32();
    float* y = c.out[0]->f32();
    compute_norms(x);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const int64_t o = (b * c_ + k) * sp_;
        const double* nb = norm_.data() + b * groups_;
        const double sk = scale(s, k);
        for (int64_t i = 0; i < sp_; ++i) y[o + i] = static_cast<float>(sk * x[o + i] / nb[group(i)]);
      }
  }
  // With u = x / norm: ds[c] = sum dy * u over channel c; dx = s[c] dy / norm - x * sum_g(s dy x) / norm^3.
  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* s = c.params[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    compute_norms(x);
    if (c.param_grad[0]) {
      float* ds = c.param_grad[0]->f32();
      c.param_grad[0]->zero();
      for (int64_t b = 0; b < n_; ++b)
        for (int64_t k = 0; k < c_; ++k) {
          const int64_t o = (b * c_ + k) * sp_;
          const double* nb = norm_.data() + b * groups_;
          double acc = 0;
          for (int64_t i = 0; i < sp_; ++i) acc += static_cast<double>(dy[o + i]) * x[o + i] / nb[group(i)];
          ds[a_.channel_shared ? 0 : k] += static_cast<float>(acc);
        }
    }
    if (!c.in_grad[0]) return;
    std::fill(dot_.begin(), dot_.end(), 0.0);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const int64_t o = (b * c_ + k) * sp_;
        const double sk = scale(s, k);
        double* db = dot_.data() + b * groups_;
        for (int64_t i = 0; i < sp_; ++i) db[group(i)] += sk * dy[o + i] * x[o + i];
      }
    float* dx = c.in_grad[0]->f32();
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const int64_t o = (b * c_ + k) * sp_;
        const double sk = scale(s, k);
        const double* nb = norm_.data() + b * groups_;
        const double* db = dot_.data() + b * groups_;
        for (int64_t i = 0; i < sp_; ++i) {
          const double nv = nb[group(i)];
          dx[o + i] = static_cast<float>(sk * dy[o + i] / nv - x[o + i] * db[group(i)] / (nv * nv * nv));
        }
      }
  }

 private:
  NormalizeAttrs a_;
  int64_t n_ = 0, c_ = 0, sp_ = 0, groups_ = 0;
  std::vector<double> norm_, dot_;  // per (sample, group): the norm; s dy . x
};

}  // namespace

BKS_REGISTER_OP_DEF("Normalize", NormalizeDef);
BKS_REGISTER_KERNEL("Normalize", ::bks::DeviceKind::cpu, NormalizeKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
