// Dropout (inverted, as Caffe): TRAIN keeps each element with probability 1 - ratio and
// scales it by 1 / (1 - ratio); TEST passes data through. The mask is a pure function of
// (seed, layer, step), so resumed runs drop the same units.
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/op.h"

namespace bks {
namespace {

class DropoutOp final : public Op {
 public:
  explicit DropoutOp(const OpInit& i) : Op(i), ratio_(i.node.param.dropout_param().dropout_ratio()) {
    if (!(ratio_ >= 0.f && ratio_ < 1.f)) fail("dropout_ratio must be in [0, 1), got {}", ratio_);
    scale_ = 1.f / (1.f - ratio_);
  }
  int min_inputs() const override { return 1; }
  bool allows_inplace() const override { return true; }
  bool backward_reads_input() const override { return false; }
  LayoutRule layout_rule() const override { return LayoutRule::any_in_same_out; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override { out[0] = in[0]; }
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

BKS_REGISTER_OP("Dropout", DropoutOp);

}  // namespace bks
