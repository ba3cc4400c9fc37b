// Accuracy: fraction of items whose label is among the top_k scores (ties count against),
// with an optional second top holding per-class accuracy.
#include "ops/op.h"

namespace bks {
namespace {

// Predictions viewed as (outer, classes, inner) around accuracy_param.axis.
struct AccuracyGeometry {
  int64_t outer = 0, ch = 0, inner = 0;
};

// The geometry of (predictions, labels), checked against top_k and the label count.
AccuracyGeometry accuracy_geometry(const OpContext& c, const std::vector<Shape>& in) {
  const auto& p = c.node.param.accuracy_param();
  int axis = canonical_axis(p.axis(), static_cast<int>(in[0].size()), "accuracy_param.axis");
  AccuracyGeometry g;
  g.outer = shape_count(in[0], 0, axis);
  g.ch = in[0][axis];
  g.inner = shape_count(in[0], axis + 1, static_cast<int>(in[0].size()));
  if (static_cast<int64_t>(p.top_k()) > g.ch) c.fail("top_k {} exceeds the {} classes", p.top_k(), g.ch);
  if (shape_numel(in[1]) != g.outer * g.inner)
    c.fail("label count {} must equal prediction count {}", shape_numel(in[1]), g.outer * g.inner);
  return g;
}

class AccuracyDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    if (c.node.param.accuracy_param().top_k() < 1) c.fail("accuracy_param.top_k must be at least 1");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    AccuracyGeometry g = accuracy_geometry(c, in);
    out[0] = {};
    if (out.size() > 1) out[1] = {g.ch};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::training_only}); }
};

class AccuracyKernel final : public Kernel {
 public:
  explicit AccuracyKernel(const OpInit& i) : Kernel(i), p_(i.node.param.accuracy_param()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    AccuracyGeometry g = accuracy_geometry(context(), in);
    outer_ = g.outer;
    ch_ = g.ch;
    inner_ = g.inner;
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

BKS_REGISTER_OP_DEF("Accuracy", AccuracyDef);
BKS_REGISTER_KERNEL("Accuracy", ::bks::DeviceKind::cpu, AccuracyKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
