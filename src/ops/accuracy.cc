// Accuracy: fraction of items whose label is among the top_k scores (ties count against),
// with an optional second top holding per-class accuracy.
#include "ops/op.h"

namespace bks {
namespace {

struct AccuracyAttrs final : AttrsOf<AccuracyAttrs> {
  int64_t top_k = 1;
  int64_t axis = 1;
  bool ignore = false;  // items labelled ignore_label are not counted
  int64_t ignore_label = 0;
  void visit(AttrVisitor& v) override {
    v.field("top_k", top_k);
    v.field("axis", axis);
    v.field("ignore", ignore);
    v.field("ignore_label", ignore_label);
  }
};
void accuracy_from_caffe(const proto::LayerParameter& l, AccuracyAttrs& a, const std::string&) {
  const proto::AccuracyParameter& p = l.accuracy_param();
  a.top_k = p.top_k();
  a.axis = p.axis();
  if (p.has_ignore_label()) {
    a.ignore = true;
    a.ignore_label = p.ignore_label();
  }
}
void accuracy_to_caffe(const AccuracyAttrs& a, proto::LayerParameter& l) {
  proto::AccuracyParameter* p = l.mutable_accuracy_param();
  p->set_top_k(static_cast<uint32_t>(a.top_k));
  p->set_axis(static_cast<int32_t>(a.axis));
  p->clear_ignore_label();
  if (a.ignore) p->set_ignore_label(static_cast<int32_t>(a.ignore_label));
}
BKS_REGISTER_ATTRS("Accuracy", AccuracyAttrs, accuracy_from_caffe, accuracy_to_caffe);

// Predictions viewed as (outer, classes, inner) around accuracy_param.axis.
struct AccuracyGeometry {
  int64_t outer = 0, ch = 0, inner = 0;
};

// The geometry of (predictions, labels), checked against top_k and the label count.
AccuracyGeometry accuracy_geometry(const OpContext& c, const std::vector<Shape>& in) {
  const AccuracyAttrs& a = c.node.attrs.as<AccuracyAttrs>();
  int axis = canonical_axis(a.axis, static_cast<int>(in[0].size()), "accuracy_param.axis");
  AccuracyGeometry g;
  g.outer = shape_count(in[0], 0, axis);
  g.ch = in[0][axis];
  g.inner = shape_count(in[0], axis + 1, static_cast<int>(in[0].size()));
  if (a.top_k > g.ch) c.fail("top_k {} exceeds the {} classes", a.top_k, g.ch);
  if (shape_numel(in[1]) != g.outer * g.inner)
    c.fail("label count {} must equal prediction count {}", shape_numel(in[1]), g.outer * g.inner);
  return g;
}

class AccuracyDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    if (c.node.attrs.as<AccuracyAttrs>().top_k < 1) c.fail("accuracy_param.top_k must be at least 1");
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
  explicit AccuracyKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<AccuracyAttrs>()) {}
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
        if (a_.ignore && l == a_.ignore_label) continue;
        if (l < 0 || l >= ch_) runtime_error("{}: label {} is outside [0, {})", where_, l, ch_);
        const float* px = x + o * ch_ * inner_ + i;
        float truth = px[l * inner_];
        int64_t better = -1;  // the true class counts itself
        for (int64_t k = 0; k < ch_; ++k) better += px[k * inner_] >= truth;
        bool hit = better < a_.top_k;
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
  AccuracyAttrs a_;
  int64_t outer_ = 0, ch_ = 0, inner_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("Accuracy", AccuracyDef);
BKS_REGISTER_KERNEL("Accuracy", ::bks::DeviceKind::cpu, AccuracyKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
