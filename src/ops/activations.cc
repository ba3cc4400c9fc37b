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
    reads_y_ = !needs_x_;
    zero_preserving_ = true;
  }
  struct Kernel {
    float slope;
    float ux;  // 1: the sign comes from x, 0: from y (arithmetic, so no load is conditional)
    float f(float x) const { return std::max(x, 0.f) + slope * std::min(x, 0.f); }
    float grad(float x, float y) const { return ux * x + (1.f - ux) * y > 0.f ? 1.f : slope; }
  };
  Kernel kernel() const { return {slope_, needs_x_ ? 1.f : 0.f}; }

 private:
  float slope_;
};

class SigmoidOp final : public ElementwiseOp<SigmoidOp> {
 public:
  explicit SigmoidOp(const OpInit& i) : ElementwiseOp(i) {
    needs_x_ = false;
    reads_y_ = true;
  }
  struct Kernel {
    float f(float x) const { return 0.5f * std::tanh(0.5f * x) + 0.5f; }
    float grad(float, float y) const { return y * (1.f - y); }
  };
  Kernel kernel() const { return {}; }
};

class TanHOp final : public ElementwiseOp<TanHOp> {
 public:
  explicit TanHOp(const OpInit& i) : ElementwiseOp(i) {
    needs_x_ = false;
    reads_y_ = true;
    zero_preserving_ = true;
  }
  struct Kernel {
    float f(float x) const { return std::tanh(x); }
    float grad(float, float y) const { return 1.f - y * y; }
  };
  Kernel kernel() const { return {}; }
};

class ELUOp final : public ElementwiseOp<ELUOp> {
 public:
  explicit ELUOp(const OpInit& i) : ElementwiseOp(i), alpha_(i.node.param.elu_param().alpha()) {
    needs_x_ = alpha_ <= 0.f;
    reads_y_ = true;
    zero_preserving_ = true;
  }
  struct Kernel {
    float alpha;
    bool use_x;
    float f(float x) const { return x > 0.f ? x : alpha * (std::exp(x) - 1.f); }
    float grad(float x, float y) const { return (use_x ? x > 0.f : y > 0.f) ? 1.f : y + alpha; }
  };
  Kernel kernel() const { return {alpha_, needs_x_}; }

 private:
  float alpha_;
};

class AbsValOp final : public ElementwiseOp<AbsValOp> {
 public:
  explicit AbsValOp(const OpInit& i) : ElementwiseOp(i) { zero_preserving_ = true; }
  struct Kernel {
    float f(float x) const { return std::fabs(x); }
    float grad(float x, float) const { return static_cast<float>((x > 0.f) - (x < 0.f)); }
  };
  Kernel kernel() const { return {}; }
};

class PowerOp final : public ElementwiseOp<PowerOp> {
 public:
  explicit PowerOp(const OpInit& i) : ElementwiseOp(i) {
    auto& p = i.node.param.power_param();
    power_ = p.power();
    scale_ = p.scale();
    shift_ = p.shift();
  }
  struct Kernel {
    float power, scale, shift;
    float f(float x) const { return power == 1.f ? shift + scale * x : std::pow(shift + scale * x, power); }
    float grad(float x, float) const {
      return power == 1.f ? scale : power * scale * std::pow(shift + scale * x, power - 1.f);
    }
  };
  Kernel kernel() const { return {power_, scale_, shift_}; }

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
    reads_y_ = true;
  }
  struct Kernel {
    float in_scale, out_scale;
    float f(float x) const { return out_scale * std::exp(in_scale * x); }
    float grad(float, float y) const { return y * in_scale; }
  };
  Kernel kernel() const { return {in_scale_, out_scale_}; }

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
  struct Kernel {
    float inv_log_base, scale, shift;
    float f(float x) const { return std::log(shift + scale * x) * inv_log_base; }
    float grad(float x, float) const { return scale * inv_log_base / (shift + scale * x); }
  };
  Kernel kernel() const { return {inv_log_base_, scale_, shift_}; }

 private:
  float inv_log_base_, scale_, shift_;
};

class BNLLOp final : public ElementwiseOp<BNLLOp> {
 public:
  using ElementwiseOp::ElementwiseOp;
  struct Kernel {
    float f(float x) const { return x > 0.f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
    float grad(float x, float) const { return 1.f / (1.f + std::exp(-x)); }
  };
  Kernel kernel() const { return {}; }
};

class ClipOp final : public ElementwiseOp<ClipOp> {
 public:
  explicit ClipOp(const OpInit& i) : ElementwiseOp(i) {
    if (!i.node.param.has_clip_param()) fail("clip_param with min and max is required");
    lo_ = i.node.param.clip_param().min();
    hi_ = i.node.param.clip_param().max();
    if (lo_ > hi_) fail("clip_param.min {} exceeds max {}", lo_, hi_);
  }
  struct Kernel {
    float lo, hi;
    float f(float x) const { return std::min(std::max(x, lo), hi); }
    float grad(float x, float) const { return (x >= lo && x <= hi) ? 1.f : 0.f; }
  };
  Kernel kernel() const { return {lo_, hi_}; }

 private:
  float lo_, hi_;
};

class SwishOp final : public ElementwiseOp<SwishOp> {
 public:
  explicit SwishOp(const OpInit& i) : ElementwiseOp(i), beta_(i.node.param.swish_param().beta()) {
    reads_y_ = true;
    zero_preserving_ = true;
  }
  struct Kernel {
    float beta;
    float f(float x) const { return x / (1.f + std::exp(-beta * x)); }
    float grad(float x, float y) const {
      float s = 1.f / (1.f + std::exp(-beta * x));
      return beta * y + s * (1.f - beta * y);
    }
  };
  Kernel kernel() const { return {beta_}; }

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
