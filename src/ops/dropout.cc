// Dropout (inverted, as Caffe): TRAIN keeps each element with probability 1 - ratio and
// scales it by 1 / (1 - ratio); TEST passes data through. The mask is a pure function of
// (seed, layer, step), so resumed runs drop the same units.
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/op.h"

namespace bks {
namespace {

struct DropoutAttrs final : AttrsOf<DropoutAttrs> {
  float dropout_ratio = 0.5f;
  void visit(AttrVisitor& v) override { v.field("dropout_ratio", dropout_ratio); }
};
void dropout_from_caffe(const proto::LayerParameter& l, DropoutAttrs& a, const std::string&) {
  a.dropout_ratio = l.dropout_param().dropout_ratio();
}
void dropout_to_caffe(const DropoutAttrs& a, proto::LayerParameter& l) {
  l.mutable_dropout_param()->set_dropout_ratio(a.dropout_ratio);
}
BKS_REGISTER_ATTRS("Dropout", DropoutAttrs, dropout_from_caffe, dropout_to_caffe);

// The dropout ratio, checked.
float dropout_ratio(const OpContext& c) {
  float r = c.node.attrs.as<DropoutAttrs>().dropout_ratio;
  if (!(r >= 0.f && r < 1.f)) c.fail("dropout_ratio must be in [0, 1), got {}", r);
  return r;
}

class DropoutDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { dropout_ratio(c); }
  void infer(const OpContext&, const std::vector<Shape>& in, std::vector<Shape>& out) const override { out[0] = in[0]; }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.allows_inplace = true;
    f.backward_reads_input = false;
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::training_only}); }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
};

class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const OpInit& i) : Kernel(i), ratio_(dropout_ratio(context())), scale_(1.f / (1.f - ratio_)) {}
  LayoutRule layout_rule() const override { return LayoutRule::any_in_same_out; }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t n = c.in[0]->phys_numel();
    if (phase_ != proto::TRAIN) {
      if (x != y) c.out[0]->copy_from(*c.in[0]);
      return;
    }
    uint64_t key = stream_key(seed_, name_, c.step);
    mask_.reshape({n});  // allocates on the first step only
    float* m = mask_.f32();
    float keep_scale = scale_, ratio = ratio_;
    parallel_ranges(n, [=](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        m[i] = uniform01(key, static_cast<uint64_t>(i)) >= ratio ? keep_scale : 0.f;
        y[i] = x[i] * m[i];
      }
    });
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    const float* m = mask_.f32();
    int64_t n = c.in_grad[0]->phys_numel();
    parallel_ranges(n, [=](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * m[i];
    });
  }

 private:
  float ratio_, scale_;
  Tensor mask_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Dropout", DropoutDef);
BKS_REGISTER_KERNEL("Dropout", ::bks::DeviceKind::cpu, DropoutKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
