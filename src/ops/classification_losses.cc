// Losses over per-item class scores with one integer label per item (N, dim):
// MultinomialLogisticLoss (the input is already a probability) and HingeLoss (one-vs-all,
// L1 or L2). Both divide by the batch size, as Caffe's do (neither reads loss_param).
#include <algorithm>
#include <cmath>

#include "ops/op.h"

namespace bks {
namespace {

constexpr float kLogThreshold = 1e-20f;  // Caffe's kLOG_THRESHOLD: log never sees 0

struct HingeLossAttrs final : AttrsOf<HingeLossAttrs> {
  enum Norm { l1, l2 };
  static constexpr const char* kNorms[] = {"L1", "L2"};
  int norm = l1;
  void visit(AttrVisitor& v) override { v.field("norm", norm, kNorms); }
};

void hinge_from_caffe(const proto::LayerParameter& l, HingeLossAttrs& a, const std::string&) {
  a.norm = l.hinge_loss_param().norm() == proto::HingeLossParameter::L2 ? HingeLossAttrs::l2 : HingeLossAttrs::l1;
}
void hinge_to_caffe(const HingeLossAttrs& a, proto::LayerParameter& l) {
  l.mutable_hinge_loss_param()->set_norm(a.norm == HingeLossAttrs::l2 ? proto::HingeLossParameter::L2
                                                                      : proto::HingeLossParameter::L1);
}
BKS_REGISTER_ATTRS("HingeLoss", HingeLossAttrs, hinge_from_caffe, hinge_to_caffe);

// Caffe's check for both: N items of dim scores, and one label per item.
void check_item_labels(const OpContext& c, const std::vector<Shape>& in) {
  if (in[0].empty() || in[0][0] <= 0) c.fail("bottom 0 needs a batch axis, got shape {}", shape_str(in[0]));
  if (in[1].empty() || in[1][0] != in[0][0] || shape_numel(in[1]) != in[0][0])
    c.fail("bottom 1 must hold one label per item ({} items), got shape {}", in[0][0], shape_str(in[1]));
}

class ItemLabelLossDef : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    check_item_labels(c, in);
    out[0] = {};
  }
  // A gradient for the scores, not the labels.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override { return loss_facts(in.size()); }
  // Inference drops them: the scores are the prediction.
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::loss}); }
};
class MultinomialLogisticLossDef final : public ItemLabelLossDef {};
class HingeLossDef final : public ItemLabelLossDef {};

// Items and scores per item of bottom 0, and label i checked against them.
struct ItemSplit {
  int64_t num = 1, dim = 1;
  static ItemSplit of(const Shape& s) { return {s[0], shape_numel(s) / s[0]}; }
};
int64_t item_label(const Kernel& k, const float* label, int64_t i, int64_t dim) {
  auto l = static_cast<int64_t>(label[i]);
  if (l < 0 || l >= dim) runtime_error("{}: label {} is outside [0, {}) at item {}", k.where(), label[i], dim, i);
  return l;
}

// loss = -sum_i log(max(p[i][label_i], 1e-20)) / N.
class MultinomialLogisticLossKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { sp_ = ItemSplit::of(in[0]); }
  void forward(OpCall& c) override {
    const float* p = c.in[0]->f32();
    const float* label = c.in[1]->f32();
    double loss = 0;
    for (int64_t i = 0; i < sp_.num; ++i)
      loss -= std::log(std::max(p[i * sp_.dim + item_label(*this, label, i, sp_.dim)], kLogThreshold));
    c.out[0]->f32()[0] = static_cast<float>(loss / static_cast<double>(sp_.num));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* p = c.in[0]->f32();
    const float* label = c.in[1]->f32();
    float* dx = c.in_grad[0]->f32();
    c.in_grad[0]->zero();
    float scale = -c.out_grad[0]->f32()[0] / static_cast<float>(sp_.num);
    for (int64_t i = 0; i < sp_.num; ++i) {
      int64_t k = i * sp_.dim + item_label(*this, label, i, sp_.dim);
      dx[k] = scale / std::max(p[k], kLogThreshold);
    }
  }

 private:
  ItemSplit sp_;
};

// With t = -1 at the label and +1 elsewhere, m = max(0, 1 + t x): loss = sum m / N (L1) or
// sum m^2 / N (L2).
class HingeLossKernel final : public Kernel {
 public:
  explicit HingeLossKernel(const OpInit& i)
      : Kernel(i), l2_(i.node.attrs.as<HingeLossAttrs>().norm == HingeLossAttrs::l2) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    sp_ = ItemSplit::of(in[0]);
    margin_.reshape(in[0]);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* label = c.in[1]->f32();
    float* m = margin_.f32();
    double loss = 0;
    for (int64_t i = 0; i < sp_.num; ++i) {
      int64_t l = item_label(*this, label, i, sp_.dim);
      for (int64_t j = 0; j < sp_.dim; ++j) {
        float t = j == l ? -1.f : 1.f;
        float v = std::max(0.f, 1.f + t * x[i * sp_.dim + j]);
        m[i * sp_.dim + j] = v;
        loss += l2_ ? static_cast<double>(v) * v : v;
      }
    }
    c.out[0]->f32()[0] = static_cast<float>(loss / static_cast<double>(sp_.num));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* label = c.in[1]->f32();
    const float* m = margin_.f32();
    float* dx = c.in_grad[0]->f32();
    float g = c.out_grad[0]->f32()[0] / static_cast<float>(sp_.num);
    for (int64_t i = 0; i < sp_.num; ++i) {
      int64_t l = item_label(*this, label, i, sp_.dim);
      for (int64_t j = 0; j < sp_.dim; ++j) {
        int64_t k = i * sp_.dim + j;
        float t = j == l ? -1.f : 1.f;
        // L1: the margin's sign (0 where the hinge is flat); L2: twice the margin.
        dx[k] = l2_ ? 2.f * g * t * m[k] : (m[k] > 0.f ? g * t : 0.f);
      }
    }
  }

 private:
  bool l2_;
  ItemSplit sp_;
  Tensor margin_;
};

}  // namespace

BKS_REGISTER_OP_DEF("MultinomialLogisticLoss", MultinomialLogisticLossDef);
BKS_REGISTER_OP_DEF("HingeLoss", HingeLossDef);
BKS_REGISTER_KERNEL("MultinomialLogisticLoss", ::bks::DeviceKind::cpu, MultinomialLogisticLossKernel, "loops",
                    kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("HingeLoss", ::bks::DeviceKind::cpu, HingeLossKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
