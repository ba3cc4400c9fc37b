// Elementwise activations and transforms of Caffe's common set.
#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"

namespace bks {
namespace {

class ReLUOp final : public ElementwiseOp<ReLUOp> {
 public:
  explicit ReLUOp(const OpInit& i) : ElementwiseOp(i), slope_(i.node.param.relu_param().negative_slope()) {
    // With a non-negative slope, sign(y) == sign(x), so the gradient can be read off y.
    needs_x_ = slope_ < 0.f;
    zero_preserving_ = true;
  }
  // Branch-free forms so the loops vectorise.
  float f(float x) const { return std::max(x, 0.f) + slope_ * std::min(x, 0.f); }
  float grad(float x, float y) const { return (needs_x_ ? x : y) > 0.f ? 1.f : slope_; }

 private:
  float slope_;
};

class SigmoidOp final : public ElementwiseOp<SigmoidOp> {
 public:
  explicit SigmoidOp(const OpInit& i) : ElementwiseOp(i) { needs_x_ = false; }
  float f(float x) const { return 0.5f * std::tanh(0.5f * x) + 0.5f; }
  float grad(float, float y) const { return y * (1.f - y); }
};

class TanHOp final : public ElementwiseOp<TanHOp> {
 public:
  explicit TanHOp(const OpInit& i) : ElementwiseOp(i) {
    needs_x_ = false;
    zero_preserving_ = true;
  }
  float f(float x) const { return std::tanh(x); }
  float grad(float, float y) const { return 1.f - y * y; }
};

class ELUOp final : public ElementwiseOp<ELUOp> {
 public:
  explicit ELUOp(const OpInit& i) : ElementwiseOp(i), alpha_(i.node.param.elu_param().alpha()) {
    needs_x_ = alpha_ <= 0.f;
    zero_preserving_ = true;
  }
  float f(float x) const { return x > 0.f ? x : alpha_ * (std::exp(x) - 1.f); }
  float grad(float x, float y) const { return (needs_x_ ? x > 0.f : y > 0.f) ? 1.f : y + alpha_; }

 private:
  float alpha_;
};

class AbsValOp final : public ElementwiseOp<AbsValOp> {
 public:
  explicit AbsValOp(const OpInit& i) : ElementwiseOp(i) { zero_preserving_ = true; }
  float f(float x) const { return std::fabs(x); }
  float grad(float x, float) const { return static_cast<float>((x > 0.f) - (x < 0.f)); }
};

class PowerOp final : public ElementwiseOp<PowerOp> {
 public:
  explicit PowerOp(const OpInit& i) : ElementwiseOp(i) {
    auto& p = i.node.param.power_param();
    power_ = p.power();
    scale_ = p.scale();
    shift_ = p.shift();
  }
  float f(float x) const { return power_ == 1.f ? shift_ + scale_ * x : std::pow(shift_ + scale_ * x, power_); }
  float grad(float x, float) const {
    if (power_ == 1.f) return scale_;
    return power_ * scale_ * std::pow(shift_ + scale_ * x, power_ - 1.f);
  }

 private:
  float power_, scale_, shift_;
};

// Shared by Exp and Log: Caffe's base -1 means e.
float log_of_base(float base, const Op& op) {
  if (base == -1.f) return 1.f;
  if (!(base > 0.f)) throw InputError(op.where() + ": base must be positive or -1 (for e)");
  return std::log(base);
}

class ExpOp final : public ElementwiseOp<ExpOp> {
 public:
  explicit ExpOp(const OpInit& i) : ElementwiseOp(i) {
    auto& p = i.node.param.exp_param();
    float lb = log_of_base(p.base(), *this);
    in_scale_ = lb * p.scale();
    out_scale_ = std::exp(lb * p.shift());
    needs_x_ = false;
  }
  float f(float x) const { return out_scale_ * std::exp(in_scale_ * x); }
  float grad(float, float y) const { return y * in_scale_; }

 private:
  float in_scale_, out_scale_;
};

class LogOp final : public ElementwiseOp<LogOp> {
 public:
  explicit LogOp(const OpInit& i) : ElementwiseOp(i) {
    auto& p = i.node.param.log_param();
    inv_log_base_ = 1.f / log_of_base(p.base(), *this);
    scale_ = p.scale();
    shift_ = p.shift();
  }
  float f(float x) const { return std::log(shift_ + scale_ * x) * inv_log_base_; }
  float grad(float x, float) const { return scale_ * inv_log_base_ / (shift_ + scale_ * x); }

 private:
  float inv_log_base_, scale_, shift_;
};

class BNLLOp final : public ElementwiseOp<BNLLOp> {
 public:
  using ElementwiseOp::ElementwiseOp;
  float f(float x) const { return x > 0.f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
  float grad(float x, float) const { return 1.f / (1.f + std::exp(-x)); }
};

class ClipOp final : public ElementwiseOp<ClipOp> {
 public:
  explicit ClipOp(const OpInit& i) : ElementwiseOp(i) {
    if (!i.node.param.has_clip_param()) fail("clip_param with min and max is required");
    lo_ = i.node.param.clip_param().min();
    hi_ = i.node.param.clip_param().max();
    if (lo_ > hi_) fail("clip_param.min {} exceeds max {}", lo_, hi_);
  }
  float f(float x) const { return std::min(std::max(x, lo_), hi_); }
  float grad(float x, float) const { return (x >= lo_ && x <= hi_) ? 1.f : 0.f; }

 private:
  float lo_, hi_;
};

class SwishOp final : public ElementwiseOp<SwishOp> {
 public:
  explicit SwishOp(const OpInit& i) : ElementwiseOp(i), beta_(i.node.param.swish_param().beta()) {
    zero_preserving_ = true;
  }
  float f(float x) const { return x / (1.f + std::exp(-beta_ * x)); }
  float grad(float x, float y) const {
    float s = 1.f / (1.f + std::exp(-beta_ * x));
    return beta_ * y + s * (1.f - beta_ * y);
  }

 private:
  float beta_;
};

}  // namespace

BKS_REGISTER_OP("ReLU", ReLUOp);
BKS_REGISTER_OP("Sigmoid", SigmoidOp);
BKS_REGISTER_OP("TanH", TanHOp);
BKS_REGISTER_OP("ELU", ELUOp);
BKS_REGISTER_OP("AbsVal", AbsValOp);
BKS_REGISTER_OP("Power", PowerOp);
BKS_REGISTER_OP("Exp", ExpOp);
BKS_REGISTER_OP("Log", LogOp);
BKS_REGISTER_OP("BNLL", BNLLOp);
BKS_REGISTER_OP("Clip", ClipOp);
BKS_REGISTER_OP("Swish", SwishOp);

}  // namespace bks
