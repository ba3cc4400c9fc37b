// Elementwise activations and transforms of Caffe's common set (see ops/elementwise.h).
// Sigmoid, TanH, AbsVal and BNLL take no attributes.
#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "ops/vector_math.h"

namespace bks {
namespace {

void no_traits(const Node&, OpTraits&) {}

struct ReLUAttrs final : AttrsOf<ReLUAttrs> {
  float negative_slope = 0.f;
  void visit(AttrVisitor& v) override { v.field("negative_slope", negative_slope); }
};
void relu_from_caffe(const proto::LayerParameter& l, ReLUAttrs& a, const std::string&) {
  a.negative_slope = l.relu_param().negative_slope();
}
void relu_to_caffe(const ReLUAttrs& a, proto::LayerParameter& l) {
  l.mutable_relu_param()->set_negative_slope(a.negative_slope);
}
BKS_REGISTER_ATTRS("ReLU", ReLUAttrs, relu_from_caffe, relu_to_caffe);

struct ReLUFn {
  float slope;
  float ux;  // 1: the sign comes from x, 0: from y (arithmetic, so no load is conditional)
  static ReLUFn from(const OpContext& c) {
    float s = slope_of(c.node);
    return {s, s < 0.f ? 1.f : 0.f};
  }
  static void add_traits(const Node&, OpTraits& t) { t.fusable_activation = true; }
  static float slope_of(const Node& n) { return n.attrs.as<ReLUAttrs>().negative_slope; }
  // With a non-negative slope, sign(y) == sign(x), so the gradient can be read off y.
  ElementwiseFlow flow() const { return {slope < 0.f, !(slope < 0.f), true}; }
  float f(float x) const { return (x > 0.f ? x : 0.f) + slope * (x < 0.f ? x : 0.f); }
  float grad(float x, float y) const { return ux * x + (1.f - ux) * y > 0.f ? 1.f : slope; }
};

struct SigmoidFn {
  static SigmoidFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, false}; }
  float f(float x) const { return 0.5f * tanh_vec(0.5f * x) + 0.5f; }
  float grad(float, float y) const { return y * (1.f - y); }
};

struct TanHFn {
  static TanHFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, true}; }
  float f(float x) const { return tanh_vec(x); }
  float grad(float, float y) const { return 1.f - y * y; }
};

struct ELUAttrs final : AttrsOf<ELUAttrs> {
  float alpha = 1.f;
  void visit(AttrVisitor& v) override { v.field("alpha", alpha); }
};
void elu_from_caffe(const proto::LayerParameter& l, ELUAttrs& a, const std::string&) {
  a.alpha = l.elu_param().alpha();
}
void elu_to_caffe(const ELUAttrs& a, proto::LayerParameter& l) { l.mutable_elu_param()->set_alpha(a.alpha); }
BKS_REGISTER_ATTRS("ELU", ELUAttrs, elu_from_caffe, elu_to_caffe);

struct ELUFn {
  float alpha;
  float ux;  // 1: the sign comes from x (alpha <= 0), 0: from y
  static ELUFn from(const OpContext& c) {
    float a = c.node.attrs.as<ELUAttrs>().alpha;
    return {a, a <= 0.f ? 1.f : 0.f};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {ux > 0.f, true, true}; }
  float f(float x) const { return x > 0.f ? x : alpha * (exp_vec(x) - 1.f); }
  float grad(float x, float y) const { return ux * x + (1.f - ux) * y > 0.f ? 1.f : y + alpha; }
};

struct AbsValFn {
  static AbsValFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, false, true}; }
  float f(float x) const { return std::fabs(x); }
  float grad(float x, float) const { return static_cast<float>((x > 0.f) - (x < 0.f)); }
};

// y = (shift + scale * x) ^ power.
struct PowerAttrs final : AttrsOf<PowerAttrs> {
  float power = 1.f, scale = 1.f, shift = 0.f;
  void visit(AttrVisitor& v) override {
    v.field("power", power);
    v.field("scale", scale);
    v.field("shift", shift);
  }
};
void power_from_caffe(const proto::LayerParameter& l, PowerAttrs& a, const std::string&) {
  const proto::PowerParameter& p = l.power_param();
  a.power = p.power();
  a.scale = p.scale();
  a.shift = p.shift();
}
void power_to_caffe(const PowerAttrs& a, proto::LayerParameter& l) {
  proto::PowerParameter* p = l.mutable_power_param();
  p->set_power(a.power);
  p->set_scale(a.scale);
  p->set_shift(a.shift);
}
BKS_REGISTER_ATTRS("Power", PowerAttrs, power_from_caffe, power_to_caffe);

struct PowerFn {
  float power, scale, shift;
  static PowerFn from(const OpContext& c) {
    const PowerAttrs& a = c.node.attrs.as<PowerAttrs>();
    return {a.power, a.scale, a.shift};
  }
  // power 1 is affine: y = scale * x + shift (fold-constants folds it into neighbours).
  static void add_traits(const Node& n, OpTraits& t) { t.per_channel_affine = n.attrs.as<PowerAttrs>().power == 1.f; }
  static bool affine(const Node& n, double& a, double& b) {
    const PowerAttrs& p = n.attrs.as<PowerAttrs>();
    a = p.scale;
    b = p.shift;
    return p.power == 1.f;
  }
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return power == 1.f ? shift + scale * x : std::pow(shift + scale * x, power); }
  float grad(float x, float) const {
    return power == 1.f ? scale : power * scale * std::pow(shift + scale * x, power - 1.f);
  }
};

// Exp (y = base ^ (shift + scale * x)) and Log (y = log_base(shift + scale * x)): the same
// fields, one struct.
struct ExpLogAttrs final : AttrsOf<ExpLogAttrs> {
  float base = -1.f;  // -1: e
  float scale = 1.f, shift = 0.f;
  void visit(AttrVisitor& v) override {
    v.field("base", base);
    v.field("scale", scale);
    v.field("shift", shift);
  }
};
void exp_from_caffe(const proto::LayerParameter& l, ExpLogAttrs& a, const std::string&) {
  const proto::ExpParameter& p = l.exp_param();
  a.base = p.base();
  a.scale = p.scale();
  a.shift = p.shift();
}
void exp_to_caffe(const ExpLogAttrs& a, proto::LayerParameter& l) {
  proto::ExpParameter* p = l.mutable_exp_param();
  p->set_base(a.base);
  p->set_scale(a.scale);
  p->set_shift(a.shift);
}
void log_from_caffe(const proto::LayerParameter& l, ExpLogAttrs& a, const std::string&) {
  const proto::LogParameter& p = l.log_param();
  a.base = p.base();
  a.scale = p.scale();
  a.shift = p.shift();
}
void log_to_caffe(const ExpLogAttrs& a, proto::LayerParameter& l) {
  proto::LogParameter* p = l.mutable_log_param();
  p->set_base(a.base);
  p->set_scale(a.scale);
  p->set_shift(a.shift);
}
BKS_REGISTER_ATTRS("Exp", ExpLogAttrs, exp_from_caffe, exp_to_caffe);
BKS_REGISTER_ATTRS("Log", ExpLogAttrs, log_from_caffe, log_to_caffe);

// Shared by Exp and Log: base -1 means e.
float log_of_base(float base, const OpContext& c, const char* field) {
  if (base == -1.f) return 1.f;
  if (!(base > 0.f)) c.fail("{}.base must be positive or -1 (for e)", field);
  return std::log(base);
}

struct ExpFn {
  float in_scale, out_scale;
  static ExpFn from(const OpContext& c) {
    const ExpLogAttrs& a = c.node.attrs.as<ExpLogAttrs>();
    float lb = log_of_base(a.base, c, "exp_param");
    return {lb * a.scale, std::exp(lb * a.shift)};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, false}; }
  float f(float x) const { return out_scale * std::exp(in_scale * x); }
  float grad(float, float y) const { return y * in_scale; }
};

struct LogFn {
  float inv_log_base, scale, shift;
  static LogFn from(const OpContext& c) {
    const ExpLogAttrs& a = c.node.attrs.as<ExpLogAttrs>();
    return {1.f / log_of_base(a.base, c, "log_param"), a.scale, a.shift};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return std::log(shift + scale * x) * inv_log_base; }
  float grad(float x, float) const { return scale * inv_log_base / (shift + scale * x); }
};

struct BNLLFn {
  static BNLLFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return x > 0.f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
  float grad(float x, float) const { return 1.f / (1.f + std::exp(-x)); }
};

struct ClipAttrs final : AttrsOf<ClipAttrs> {
  float min = 0.f, max = 0.f;
  void visit(AttrVisitor& v) override {
    v.field("min", min);
    v.field("max", max);
  }
};
// Caffe has no default bounds, so a Clip layer must give them.
void clip_from_caffe(const proto::LayerParameter& l, ClipAttrs& a, const std::string& where) {
  if (!l.has_clip_param()) input_error("{}: clip_param with min and max is required", where);
  a.min = l.clip_param().min();
  a.max = l.clip_param().max();
}
void clip_to_caffe(const ClipAttrs& a, proto::LayerParameter& l) {
  l.mutable_clip_param()->set_min(a.min);
  l.mutable_clip_param()->set_max(a.max);
}
BKS_REGISTER_ATTRS("Clip", ClipAttrs, clip_from_caffe, clip_to_caffe);

struct ClipFn {
  float lo, hi;
  static ClipFn from(const OpContext& c) {
    const ClipAttrs& a = c.node.attrs.as<ClipAttrs>();
    if (a.min > a.max) c.fail("clip_param.min {} exceeds max {}", a.min, a.max);
    return {a.min, a.max};
  }
  // From 0, it is a bounded ReLU a convolution applies as a post-op.
  static void add_traits(const Node& n, OpTraits& t) { t.fusable_activation = n.attrs.as<ClipAttrs>().min == 0.f; }
  static float max_of(const Node& n) { return n.attrs.as<ClipAttrs>().max; }
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return x < lo ? lo : (x > hi ? hi : x); }
  float grad(float x, float) const { return (x >= lo && x <= hi) ? 1.f : 0.f; }
};

struct SwishAttrs final : AttrsOf<SwishAttrs> {
  float beta = 1.f;
  void visit(AttrVisitor& v) override { v.field("beta", beta); }
};
void swish_from_caffe(const proto::LayerParameter& l, SwishAttrs& a, const std::string&) {
  a.beta = l.swish_param().beta();
}
void swish_to_caffe(const SwishAttrs& a, proto::LayerParameter& l) { l.mutable_swish_param()->set_beta(a.beta); }
BKS_REGISTER_ATTRS("Swish", SwishAttrs, swish_from_caffe, swish_to_caffe);

struct SwishFn {
  float beta;
  static SwishFn from(const OpContext& c) { return {c.node.attrs.as<SwishAttrs>().beta}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, true, true}; }
  float f(float x) const { return x / (1.f + exp_vec(-beta * x)); }
  float grad(float x, float y) const {
    float s = 1.f / (1.f + exp_vec(-beta * x));
    return beta * y + s * (1.f - beta * y);
  }
};

// y = min(max(x, 0), 6): the MobileNet-v2 forks' ReLU6 (no parameters). The gradient is 1
// where 0 < x < 6, which y tells as well (0 < y < 6), so it may run in place.
struct ReLU6Fn {
  static ReLU6Fn from(const OpContext&) { return {}; }
  static void add_traits(const Node&, OpTraits& t) { t.fusable_activation = true; }
  static float max_of(const Node&) { return 6.f; }
  ElementwiseFlow flow() const { return {false, true, true}; }
  float f(float x) const { return x < 0.f ? 0.f : (x > 6.f ? 6.f : x); }
  float grad(float, float y) const { return y > 0.f && y < 6.f ? 1.f : 0.f; }
};

// y = 1 where x > threshold, else 0 (Caffe's Threshold). Its gradient is zero wherever it
// exists; Caffe has no backward for it at all.
struct ThresholdAttrs final : AttrsOf<ThresholdAttrs> {
  float threshold = 0.f;
  void visit(AttrVisitor& v) override { v.field("threshold", threshold); }
};
void threshold_from_caffe(const proto::LayerParameter& l, ThresholdAttrs& a, const std::string&) {
  a.threshold = l.threshold_param().threshold();
}
void threshold_to_caffe(const ThresholdAttrs& a, proto::LayerParameter& l) {
  l.mutable_threshold_param()->set_threshold(a.threshold);
}
BKS_REGISTER_ATTRS("Threshold", ThresholdAttrs, threshold_from_caffe, threshold_to_caffe);

struct ThresholdFn {
  float t;
  static ThresholdFn from(const OpContext& c) { return {c.node.attrs.as<ThresholdAttrs>().threshold}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, false, false}; }
  float f(float x) const { return x > t ? 1.f : 0.f; }
  float grad(float, float) const { return 0.f; }
};

}  // namespace

BKS_REGISTER_ELEMENTWISE("ReLU", ReLUFn);
BKS_REGISTER_ELEMENTWISE("Sigmoid", SigmoidFn);
BKS_REGISTER_ELEMENTWISE("TanH", TanHFn);
BKS_REGISTER_ELEMENTWISE("ELU", ELUFn);
BKS_REGISTER_ELEMENTWISE("AbsVal", AbsValFn);
BKS_REGISTER_ELEMENTWISE("Power", PowerFn);
BKS_REGISTER_ELEMENTWISE("Exp", ExpFn);
BKS_REGISTER_ELEMENTWISE("Log", LogFn);
BKS_REGISTER_ELEMENTWISE("BNLL", BNLLFn);
BKS_REGISTER_ELEMENTWISE("Clip", ClipFn);
BKS_REGISTER_ELEMENTWISE("Swish", SwishFn);
BKS_REGISTER_ELEMENTWISE("Threshold", ThresholdFn);
BKS_REGISTER_ELEMENTWISE("ReLU6", ReLU6Fn);

}  // namespace bks
