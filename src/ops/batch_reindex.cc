// BatchReindex: output item i is input item idx[i] (the second bottom, 1-d), so items may
// repeat or drop out. Backward sums each output item's gradient into its source item.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

class BatchReindexDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (in[0].empty()) c.fail("bottom 0 needs a batch axis, got shape {}", shape_str(in[0]));
    if (in[1].size() != 1) c.fail("bottom 1 (the indices) must be 1-d, got shape {}", shape_str(in[1]));
    out[0] = in[0];
    out[0][0] = in[1][0];
  }
  // The indices take no gradient; backward reads them but not the data.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.can_propagate_to = {true, false};
    f.reads_input_in_backward = {false, true};
    return f;
  }
};

class BatchReindexKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    items_ = in[0][0];
    inner_ = items_ > 0 ? shape_numel(in[0]) / items_ : 0;
    picks_ = in[1][0];
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* idx = c.in[1]->f32();
    float* y = c.out[0]->f32();
    for (int64_t i = 0; i < picks_; ++i)
      std::memcpy(y + i * inner_, x + source(idx, i) * inner_, inner_ * sizeof(float));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* idx = c.in[1]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    c.in_grad[0]->zero();
    for (int64_t i = 0; i < picks_; ++i) {
      float* d = dx + source(idx, i) * inner_;
      for (int64_t k = 0; k < inner_; ++k) d[k] += dy[i * inner_ + k];
    }
  }

 private:
  int64_t source(const float* idx, int64_t i) const {
    auto k = static_cast<int64_t>(idx[i]);
    if (!(idx[i] >= 0.f) || k >= items_)
      runtime_error("{}: index {} at position {} is outside the batch [0, {})", where_, idx[i], i, items_);
    return k;
  }
  int64_t items_ = 0, inner_ = 0, picks_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("BatchReindex", BatchReindexDef);
BKS_REGISTER_KERNEL("BatchReindex", ::bks::DeviceKind::cpu, BatchReindexKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
