// Accuracy: fraction of items whose label is among the top_k scores (ties count against),
// with an optional second top holding per-class accuracy.
#include "ops/op.h"

namespace bks {
namespace {

class AccuracyOp final : public Op {
 public:
  explicit AccuracyOp(const OpInit& i) : Op(i), p_(i.node.param.accuracy_param()) {
    if (p_.top_k() < 1) fail("accuracy_param.top_k must be at least 1");
  }
  int min_inputs() const override { return 2; }
  int max_outputs() const override { return 2; }
  bool has_backward() const override { return false; }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int axis = canonical_axis(p_.axis(), static_cast<int>(in[0].size()), "accuracy_param.axis");
    outer_ = shape_count(in[0], 0, axis);
    ch_ = in[0][axis];
    inner_ = shape_count(in[0], axis + 1, static_cast<int>(in[0].size()));
    if (static_cast<int64_t>(p_.top_k()) > ch_) fail("top_k {} exceeds the {} classes", p_.top_k(), ch_);
    if (shape_numel(in[1]) != outer_ * inner_)
      fail("label count {} must equal prediction count {}", shape_numel(in[1]), outer_ * inner_);
    out[0] = {};
    if (out.size() > 1) out[1] = {ch_};
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* label = c.in[1]->f32();
    std::vector<int64_t> per_class_total(c.out.size() > 1 ? ch_ : 0), per_class_hit(per_class_total.size());
    int64_t hits = 0, count = 0;
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        int l = static_cast<int>(label[o * inner_ + i]);
        if (p_.has_ignore_label() && l == p_.ignore_label()) continue;
        if (l < 0 || l >= ch_) runtime_error("{}: label {} is outside [0, {})", where_, l, ch_);
        const float* px = x + o * ch_ * inner_ + i;
        float truth = px[l * inner_];
        int64_t better = -1;  // the true class counts itself
        for (int64_t k = 0; k < ch_; ++k) better += px[k * inner_] >= truth;
        bool hit = better < static_cast<int64_t>(p_.top_k());
        hits += hit;
        ++count;
        if (!per_class_total.empty()) {
          ++per_class_total[l];
          per_class_hit[l] += hit;
        }
      }
    c.out[0]->f32()[0] = count ? static_cast<float>(hits) / count : 0.f;
    for (size_t k = 0; k < per_class_total.size(); ++k)
      c.out[1]->f32()[k] = per_class_total[k] ? static_cast<float>(per_class_hit[k]) / per_class_total[k] : 0.f;
  }

 private:
  proto::AccuracyParameter p_;
  int64_t outer_ = 0, ch_ = 0, inner_ = 0;
};

}  // namespace

BKS_REGISTER_OP("Accuracy", AccuracyOp);

}  // namespace bks
