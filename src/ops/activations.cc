// Elementwise activations and transforms of Caffe's common set (see ops/elementwise.h).
#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"

namespace bks {
namespace {

void no_traits(const Node&, OpTraits&) {}

struct ReLUFn {
  float slope;
  float ux;  // 1: the sign comes from x, 0: from y (arithmetic, so no load is conditional)
  static ReLUFn from(const OpContext& c) {
    float s = c.node.param.relu_param().negative_slope();
    return {s, s < 0.f ? 1.f : 0.f};
  }
  static void add_traits(const Node&, OpTraits& t) { t.fusable_activation = true; }
  static float slope_of(const Node& n) { return n.param.relu_param().negative_slope(); }
  // With a non-negative slope, sign(y) == sign(x), so the gradient can be read off y.
  ElementwiseFlow flow() const { return {slope < 0.f, !(slope < 0.f), true}; }
  float f(float x) const { return std::max(x, 0.f) + slope * std::min(x, 0.f); }
  float grad(float x, float y) const { return ux * x + (1.f - ux) * y > 0.f ? 1.f : slope; }
};

struct SigmoidFn {
  static SigmoidFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, false}; }
  float f(float x) const { return 0.5f * std::tanh(0.5f * x) + 0.5f; }
  float grad(float, float y) const { return y * (1.f - y); }
};

struct TanHFn {
  static TanHFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, true}; }
  float f(float x) const { return std::tanh(x); }
  float grad(float, float y) const { return 1.f - y * y; }
};

struct ELUFn {
  float alpha;
  bool use_x;
  static ELUFn from(const OpContext& c) {
    float a = c.node.param.elu_param().alpha();
    return {a, a <= 0.f};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {use_x, true, true}; }
  float f(float x) const { return x > 0.f ? x : alpha * (std::exp(x) - 1.f); }
  float grad(float x, float y) const { return (use_x ? x > 0.f : y > 0.f) ? 1.f : y + alpha; }
};

struct AbsValFn {
  static AbsValFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, false, true}; }
  float f(float x) const { return std::fabs(x); }
  float grad(float x, float) const { return static_cast<float>((x > 0.f) - (x < 0.f)); }
};

struct PowerFn {
  float power, scale, shift;
  static PowerFn from(const OpContext& c) {
    auto& p = c.node.param.power_param();
    return {p.power(), p.scale(), p.shift()};
  }
  // power 1 is affine: y = scale * x + shift (fold-constants folds it into neighbours).
  static void add_traits(const Node& n, OpTraits& t) { t.per_channel_affine = n.param.power_param().power() == 1.f; }
  static bool affine(const Node& n, double& a, double& b) {
    const auto& p = n.param.power_param();
    a = p.scale();
    b = p.shift();
    return p.power() == 1.f;
  }
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return power == 1.f ? shift + scale * x : std::pow(shift + scale * x, power); }
  float grad(float x, float) const {
    return power == 1.f ? scale : power * scale * std::pow(shift + scale * x, power - 1.f);
  }
};

// Shared by Exp and Log: Caffe's base -1 means e.
float log_of_base(float base, const OpContext& c, const char* field) {
  if (base == -1.f) return 1.f;
  if (!(base > 0.f)) c.fail("{}.base must be positive or -1 (for e)", field);
  return std::log(base);
}

struct ExpFn {
  float in_scale, out_scale;
  static ExpFn from(const OpContext& c) {
    auto& p = c.node.param.exp_param();
    float lb = log_of_base(p.base(), c, "exp_param");
    return {lb * p.scale(), std::exp(lb * p.shift())};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {false, true, false}; }
  float f(float x) const { return out_scale * std::exp(in_scale * x); }
  float grad(float, float y) const { return y * in_scale; }
};

struct LogFn {
  float inv_log_base, scale, shift;
  static LogFn from(const OpContext& c) {
    auto& p = c.node.param.log_param();
    return {1.f / log_of_base(p.base(), c, "log_param"), p.scale(), p.shift()};
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

struct ClipFn {
  float lo, hi;
  static ClipFn from(const OpContext& c) {
    if (!c.node.param.has_clip_param()) c.fail("clip_param with min and max is required");
    float lo = c.node.param.clip_param().min(), hi = c.node.param.clip_param().max();
    if (lo > hi) c.fail("clip_param.min {} exceeds max {}", lo, hi);
    return {lo, hi};
  }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {}; }
  float f(float x) const { return std::min(std::max(x, lo), hi); }
  float grad(float x, float) const { return (x >= lo && x <= hi) ? 1.f : 0.f; }
};

struct SwishFn {
  float beta;
  static SwishFn from(const OpContext& c) { return {c.node.param.swish_param().beta()}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, true, true}; }
  float f(float x) const { return x / (1.f + std::exp(-beta * x)); }
  float grad(float x, float y) const {
    float s = 1.f / (1.f + std::exp(-beta * x));
    return beta * y + s * (1.f - beta * y);
  }
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

}  // namespace bks
