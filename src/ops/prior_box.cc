// PriorBox (the SSD fork's prior_box_param): the default boxes of one feature map, which
// depend on the shapes of its bottoms only (the feature map, and the image unless
// img_size/img_h/img_w is given), never on their values. Output [1, 2, H * W * P * 4]:
// row 0 holds each box as normalised (xmin, ymin, xmax, ymax), row 1 its four variances.
// Per cell, per min_size: the square min box, the square sqrt(min * max) box, then one
// box per further aspect ratio. As in the fork, min_size and max_size are truncated to
// integers before use (a min_size of 30.5 makes 30-pixel boxes).
#include <cmath>
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct PriorBoxAttrs final : AttrsOf<PriorBoxAttrs> {
  std::vector<float> min_size, max_size, aspect_ratio, variance;
  bool flip = true;
  bool clip = false;
  int64_t img_h = 0, img_w = 0;      // 0: the image bottom's
  float step_h = 0.f, step_w = 0.f;  // 0: image size / feature map size
  float offset = 0.5f;
  void visit(AttrVisitor& v) override {
    v.field("min_size", min_size);
    v.field("max_size", max_size);
    v.field("aspect_ratio", aspect_ratio);
    v.field("variance", variance);
    v.field("flip", flip);
    v.field("clip", clip);
    v.field("img_h", img_h);
    v.field("img_w", img_w);
    v.field("step_h", step_h);
    v.field("step_w", step_w);
    v.field("offset", offset);
  }
};
// img_size and step are the fork's spellings of equal h and w.
void prior_box_from_caffe(const proto::LayerParameter& l, PriorBoxAttrs& a, const std::string& where) {
  const proto::PriorBoxParameter& p = l.prior_box_param();
  a.min_size.assign(p.min_size().begin(), p.min_size().end());
  a.max_size.assign(p.max_size().begin(), p.max_size().end());
  a.aspect_ratio.assign(p.aspect_ratio().begin(), p.aspect_ratio().end());
  a.variance.assign(p.variance().begin(), p.variance().end());
  a.flip = p.flip();
  a.clip = p.clip();
  a.offset = p.offset();
  if (p.has_img_h() || p.has_img_w()) {
    if (p.has_img_size()) input_error("{}: give prior_box_param.img_size or img_h/img_w, not both", where);
    if (p.img_h() == 0 || p.img_w() == 0)
      input_error("{}: prior_box_param.img_h and img_w must both be positive", where);
    a.img_h = p.img_h();
    a.img_w = p.img_w();
  } else if (p.has_img_size()) {
    if (p.img_size() == 0) input_error("{}: prior_box_param.img_size must be positive", where);
    a.img_h = a.img_w = p.img_size();
  }
  if (p.has_step_h() || p.has_step_w()) {
    if (p.has_step()) input_error("{}: give prior_box_param.step or step_h/step_w, not both", where);
    if (!(p.step_h() > 0.f) || !(p.step_w() > 0.f))
      input_error("{}: prior_box_param.step_h and step_w must both be positive", where);
    a.step_h = p.step_h();
    a.step_w = p.step_w();
  } else if (p.has_step()) {
    if (!(p.step() > 0.f)) input_error("{}: prior_box_param.step must be positive", where);
    a.step_h = a.step_w = p.step();
  }
}
void prior_box_to_caffe(const PriorBoxAttrs& a, proto::LayerParameter& l) {
  proto::PriorBoxParameter* p = l.mutable_prior_box_param();
  p->Clear();
  for (float v : a.min_size) p->add_min_size(v);
  for (float v : a.max_size) p->add_max_size(v);
  for (float v : a.aspect_ratio) p->add_aspect_ratio(v);
  for (float v : a.variance) p->add_variance(v);
  p->set_flip(a.flip);
  p->set_clip(a.clip);
  if (a.img_h > 0) {
    p->set_img_h(static_cast<uint32_t>(a.img_h));
    p->set_img_w(static_cast<uint32_t>(a.img_w));
  }
  if (a.step_h > 0.f) {
    p->set_step_h(a.step_h);
    p->set_step_w(a.step_w);
  }
  p->set_offset(a.offset);
}
BKS_REGISTER_ATTRS("PriorBox", PriorBoxAttrs, prior_box_from_caffe, prior_box_to_caffe);

// 1, then each new aspect ratio (and its inverse with flip); repeats are dropped.
std::vector<float> expanded_ratios(const PriorBoxAttrs& a) {
  std::vector<float> r{1.f};
  for (float ar : a.aspect_ratio) {
    bool seen = false;
    for (float e : r) seen = seen || std::fabs(ar - e) < 1e-6f;
    if (seen) continue;
    r.push_back(ar);
    if (a.flip) r.push_back(1.f / ar);
  }
  return r;
}

int64_t priors_per_cell(const PriorBoxAttrs& a) {
  return static_cast<int64_t>(expanded_ratios(a).size() * a.min_size.size() + a.max_size.size());
}

class PriorBoxDef final : public OpDef {
 public:
  int min_inputs(const OpContext& c) const override { return c.node.attrs.as<PriorBoxAttrs>().img_h > 0 ? 1 : 2; }
  int max_inputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const PriorBoxAttrs& a = c.node.attrs.as<PriorBoxAttrs>();
    if (a.min_size.empty()) c.fail("prior_box_param.min_size is required");
    for (float v : a.min_size)
      if (!(v > 0.f)) c.fail("prior_box_param.min_size must be positive, got {}", v);
    if (!a.max_size.empty() && a.max_size.size() != a.min_size.size())
      c.fail("prior_box_param.max_size: {} given for {} min_size", a.max_size.size(), a.min_size.size());
    for (size_t i = 0; i < a.max_size.size(); ++i)
      if (!(a.max_size[i] > a.min_size[i]))
        c.fail("prior_box_param.max_size {} must be greater than min_size {}", a.max_size[i], a.min_size[i]);
    for (float ar : a.aspect_ratio)
      if (!(ar > 0.f)) c.fail("prior_box_param.aspect_ratio must be positive, got {}", ar);
    if (a.variance.size() != 0 && a.variance.size() != 1 && a.variance.size() != 4)
      c.fail("prior_box_param.variance takes 1 or 4 values, got {}", a.variance.size());
    for (float v : a.variance)
      if (!(v > 0.f)) c.fail("prior_box_param.variance must be positive, got {}", v);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.expect_ndim(in[0], 4, 4, "the feature map (bottom 0)");
    const PriorBoxAttrs& a = c.node.attrs.as<PriorBoxAttrs>();
    if (in.size() > 1)
      c.expect_ndim(in[1], 4, 4, "the image (bottom 1)");
    else if (a.img_h == 0)
      c.fail("PriorBox needs the image as bottom 1 unless prior_box_param.img_size or img_h/img_w is given");
    const int64_t n = in[0][2] * in[0][3] * priors_per_cell(a) * 4;
    if (n <= 0) c.fail("the feature map {} has no cells", shape_str(in[0]));
    out[0] = {1, 2, n};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
};

class PriorBoxKernel final : public Kernel {
 public:
  explicit PriorBoxKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<PriorBoxAttrs>()) {}
  // The boxes depend on the shapes only: computed here, copied out by forward.
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    const int64_t fh = in[0][2], fw = in[0][3];
    const double img_h = a_.img_h > 0 ? static_cast<double>(a_.img_h) : static_cast<double>(in[1][2]);
    const double img_w = a_.img_w > 0 ? static_cast<double>(a_.img_w) : static_cast<double>(in[1][3]);
    const float step_h = a_.step_h > 0.f ? a_.step_h : static_cast<float>(img_h / fh);
    const float step_w = a_.step_w > 0.f ? a_.step_w : static_cast<float>(img_w / fw);
    const std::vector<float> ratios = expanded_ratios(a_);
    const int64_t dim = out[0][2];
    boxes_.assign(static_cast<size_t>(2 * dim), 0.f);
    float* p = boxes_.data();
    auto put = [&](float cx, float cy, double bw, double bh) {
      *p++ = static_cast<float>((cx - bw / 2.) / img_w);
      *p++ = static_cast<float>((cy - bh / 2.) / img_h);
      *p++ = static_cast<float>((cx + bw / 2.) / img_w);
      *p++ = static_cast<float>((cy + bh / 2.) / img_h);
    };
    for (int64_t h = 0; h < fh; ++h)
      for (int64_t w = 0; w < fw; ++w) {
        const float cx = (static_cast<float>(w) + a_.offset) * step_w;
        const float cy = (static_cast<float>(h) + a_.offset) * step_h;
        for (size_t s = 0; s < a_.min_size.size(); ++s) {
          const int min_px = static_cast<int>(a_.min_size[s]);
          put(cx, cy, min_px, min_px);
          if (!a_.max_size.empty()) {
            const float side =
                static_cast<float>(std::sqrt(static_cast<double>(min_px) * static_cast<int>(a_.max_size[s])));
            put(cx, cy, side, side);
          }
          for (float ar : ratios) {
            if (std::fabs(ar - 1.f) < 1e-6f) continue;
            const double r = std::sqrt(static_cast<double>(ar));
            put(cx, cy, static_cast<float>(min_px * r), static_cast<float>(min_px / r));
          }
        }
      }
    if (a_.clip)
      for (int64_t d = 0; d < dim; ++d) boxes_[d] = std::min(std::max(boxes_[d], 0.f), 1.f);
    for (int64_t d = 0; d < dim; ++d)
      boxes_[dim + d] = a_.variance.empty() ? 0.1f : a_.variance.size() == 1 ? a_.variance[0] : a_.variance[d % 4];
  }
  void forward(OpCall& c) override { std::memcpy(c.out[0]->f32(), boxes_.data(), boxes_.size() * sizeof(float)); }

 private:
  PriorBoxAttrs a_;
  std::vector<float> boxes_;
};

}  // namespace

BKS_REGISTER_OP_DEF("PriorBox", PriorBoxDef);
BKS_REGISTER_KERNEL("PriorBox", ::bks::DeviceKind::cpu, PriorBoxKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
