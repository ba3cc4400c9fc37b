// Filter (Caffe's selector layer): bottoms 0..k-1 are forwarded item by item where the last
// bottom, the selector (one value per item), is non-zero; the tops hold only those items.
// Backward copies each forwarded item's gradient back to where it came from and zeroes the
// rest; the selector takes no gradient.
//
// The tops' batch depends on the data, so the definition infers it at its largest, the
// bottoms' batch (as Caffe's first Reshape does), and declares batch_from_data: the planner
// keeps what follows plain and sized for that batch, and before each forward the executor
// asks output_batch() and reshapes the tops and every node they reach (runtime/net.h).
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

class FilterDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_inputs(const OpContext&) const override { return -1; }
  // One top per filtered bottom.
  int min_outputs(const OpContext& c) const override { return static_cast<int>(c.node.inputs.size()) - 1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const Shape& selector = in.back();
    if (selector.empty()) c.fail("the selector (last bottom) needs a batch axis, got shape {}", shape_str(selector));
    for (size_t a = 1; a < selector.size(); ++a)
      if (selector[a] != 1)
        c.fail("the selector (last bottom) must hold one value per item: axes after the first must be 1, got shape {}",
               shape_str(selector));
    for (size_t i = 0; i + 1 < in.size(); ++i) {
      if (in[i].empty() || in[i][0] != selector[0])
        c.fail("bottom {} has shape {}: every bottom needs the selector's {} items on axis 0", i, shape_str(in[i]),
               selector[0]);
      out[i] = in[i];
    }
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.batch_from_data = true;
    // The kernel keeps the forwarded indices, so backward reads no input.
    f.backward_reads_input = false;
    f.can_propagate_to.assign(in.size(), true);
    f.can_propagate_to.back() = false;
    return f;
  }
};

class FilterKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    items_ = in.back()[0];
    inner_.clear();
    for (size_t i = 0; i + 1 < in.size(); ++i) inner_.push_back(items_ > 0 ? shape_numel(in[i]) / items_ : 0);
    forwarded_.reserve(static_cast<size_t>(items_));  // no allocation per step
  }
  int64_t output_batch(const OpCall& c) override {
    select(*c.in.back());
    return static_cast<int64_t>(forwarded_.size());
  }
  void forward(OpCall& c) override {
    select(*c.in.back());
    for (size_t t = 0; t < c.out.size(); ++t) {
      if (c.out[t]->dim(0) != static_cast<int64_t>(forwarded_.size()))
        runtime_error("{}: top {} holds {} items but the selector marks {}", where_, t, c.out[t]->dim(0),
                      forwarded_.size());
      const float* x = c.in[t]->f32();
      float* y = c.out[t]->f32();
      const int64_t inner = inner_[t];
      for (size_t k = 0; k < forwarded_.size(); ++k)
        std::memcpy(y + static_cast<int64_t>(k) * inner, x + forwarded_[k] * inner, inner * sizeof(float));
    }
  }
  void backward(OpCall& c) override {
    for (size_t t = 0; t < c.out.size(); ++t) {
      if (!c.in_grad[t]) continue;
      float* dx = c.in_grad[t]->f32();
      const float* dy = c.out_grad[t]->f32();
      const int64_t inner = inner_[t];
      c.in_grad[t]->zero();
      for (size_t k = 0; k < forwarded_.size(); ++k)
        std::memcpy(dx + forwarded_[k] * inner, dy + static_cast<int64_t>(k) * inner, inner * sizeof(float));
    }
  }
  std::string kernel_name() const override { return "loops"; }

 private:
  // The items whose selector value is non-zero (NaN counts, as in Caffe's `if (*selector)`).
  void select(const Tensor& selector) {
    forwarded_.clear();
    const float* s = selector.f32();
    for (int64_t i = 0; i < items_; ++i)
      if (s[i] != 0.f) forwarded_.push_back(i);
  }
  int64_t items_ = 0;
  std::vector<int64_t> inner_;      // floats per item, per filtered bottom
  std::vector<int64_t> forwarded_;  // item indices, in order
};

}  // namespace

BKS_REGISTER_OP_DEF("Filter", FilterDef);
BKS_REGISTER_KERNEL("Filter", ::bks::DeviceKind::cpu, FilterKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
