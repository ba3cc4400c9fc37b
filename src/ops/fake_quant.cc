// FakeQuant: what quantization-aware training inserts before every Convolution and
// InnerProduct input (train --qat int8, passes/insert_fake_quant.cc). The forward pass
// rounds x to the int8 grid an INT8 deployment will use (`levels` steps on each side of
// zero over [-T, T], symmetric, as deploy's s8 inputs) and returns float; the backward pass
// is the straight-through estimator, clipped: the gradient passes where |x| <= T and stops
// where the value was clipped. T, the layer's one blob, follows each training batch's max
// |x| as a moving average (set by the first batch); TEST passes use it unchanged. deploy
// reads the trained T as the INT8 calibration threshold of the blob (no calibration pass).
#include <algorithm>
#include <cmath>

#include "ops/op.h"

namespace bks {
namespace {

struct FakeQuantAttrs final : AttrsOf<FakeQuantAttrs> {
  float levels = 127.f;
  float moving_average_fraction = 0.99f;
  void visit(AttrVisitor& v) override {
    v.field("levels", levels);
    v.field("moving_average_fraction", moving_average_fraction);
  }
};
void fake_quant_from_caffe(const proto::LayerParameter& l, FakeQuantAttrs& a, const std::string&) {
  a.levels = l.fake_quant_param().levels();
  a.moving_average_fraction = l.fake_quant_param().moving_average_fraction();
}
void fake_quant_to_caffe(const FakeQuantAttrs& a, proto::LayerParameter& l) {
  l.mutable_fake_quant_param()->set_levels(a.levels);
  l.mutable_fake_quant_param()->set_moving_average_fraction(a.moving_average_fraction);
}
BKS_REGISTER_ATTRS("FakeQuant", FakeQuantAttrs, fake_quant_from_caffe, fake_quant_to_caffe);

const FakeQuantAttrs& fake_quant_attrs(const OpContext& c) {
  const FakeQuantAttrs& a = c.node.attrs.as<FakeQuantAttrs>();
  if (!(a.levels >= 1.f && a.levels <= 32767.f) || a.levels != std::floor(a.levels))
    c.fail("fake_quant_param.levels must be a whole number from 1 to 32767, got {}", a.levels);
  if (!(a.moving_average_fraction >= 0.f && a.moving_average_fraction < 1.f))
    c.fail("fake_quant_param.moving_average_fraction must be in [0, 1), got {}", a.moving_average_fraction);
  return a;
}

class FakeQuantDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { fake_quant_attrs(c); }
  void infer(const OpContext&, const std::vector<Shape>& in, std::vector<Shape>& out) const override { out[0] = in[0]; }
  // The range: updated by the layer itself, never by the solver.
  std::vector<ParamDecl> params(const OpContext&, const std::vector<Shape>&) const override {
    return {{{1}, FillerSpec{}, false}};
  }
  // Backward reads x (to know where it was clipped): no in-place.
};

class FakeQuantKernel final : public Kernel {
 public:
  explicit FakeQuantKernel(const OpInit& i) : Kernel(i) {
    const FakeQuantAttrs& a = fake_quant_attrs(context());
    levels_ = a.levels;
    fraction_ = a.moving_average_fraction;
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    const int64_t n = c.in[0]->numel();
    float& t = c.params[0]->f32()[0];
    if (phase_ == proto::TRAIN) {
      float m = 0.f;
#pragma omp parallel for reduction(max : m)
      for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
      t = t > 0.f ? fraction_ * t + (1.f - fraction_) * m : m;
    }
    if (!(t > 0.f)) {  // no range yet (an untrained layer, or all zeros): the identity
      std::copy(x, x + n, y);
      return;
    }
    const float to_grid = levels_ / t, from_grid = t / levels_, top = levels_;
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = std::clamp(std::nearbyint(x[i] * to_grid), -top, top) * from_grid;
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    const int64_t n = c.in[0]->numel();
    const float t = c.params[0]->f32()[0];
    if (!(t > 0.f)) {
      std::copy(dy, dy + n, dx);
      return;
    }
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) dx[i] = std::fabs(x[i]) <= t ? dy[i] : 0.f;
  }

 private:
  float levels_ = 127.f, fraction_ = 0.99f;
};

}  // namespace

BKS_REGISTER_OP_DEF("FakeQuant", FakeQuantDef);
BKS_REGISTER_KERNEL("FakeQuant", ::bks::DeviceKind::cpu, FakeQuantKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
