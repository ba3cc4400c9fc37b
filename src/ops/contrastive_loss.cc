// ContrastiveLoss (Hadsell et al. 2006, as Caffe computes it): pairs (a_i, b_i) of C-vectors
// with a similarity label y_i; d_i = |a_i - b_i|. Similar pairs (y != 0) cost d^2, dissimilar
// ones max(margin - d, 0)^2 (legacy_version: max(margin - d^2, 0)); the sum is divided by
// 2N. The labels take no gradient.
#include <algorithm>
#include <cmath>

#include "ops/op.h"

namespace bks {
namespace {

struct ContrastiveLossAttrs final : AttrsOf<ContrastiveLossAttrs> {
  float margin = 1.f;
  bool legacy_version = false;
  void visit(AttrVisitor& v) override {
    v.field("margin", margin);
    v.field("legacy_version", legacy_version);
  }
};

void contrastive_from_caffe(const proto::LayerParameter& l, ContrastiveLossAttrs& a, const std::string&) {
  a.margin = l.contrastive_loss_param().margin();
  a.legacy_version = l.contrastive_loss_param().legacy_version();
}
void contrastive_to_caffe(const ContrastiveLossAttrs& a, proto::LayerParameter& l) {
  l.mutable_contrastive_loss_param()->set_margin(a.margin);
  l.mutable_contrastive_loss_param()->set_legacy_version(a.legacy_version);
}
BKS_REGISTER_ATTRS("ContrastiveLoss", ContrastiveLossAttrs, contrastive_from_caffe, contrastive_to_caffe);

// Axes after the first two (Caffe's height and width) must be 1.
bool singleton_after(const Shape& s, size_t first) {
  for (size_t d = first; d < s.size(); ++d)
    if (s[d] != 1) return false;
  return true;
}

class ContrastiveLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 3; }
  void check(const OpContext& c) const override {
    float m = c.node.attrs.as<ContrastiveLossAttrs>().margin;
    if (!std::isfinite(m)) c.fail("contrastive_loss_param.margin must be finite, got {}", m);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (in[0].empty() || in[0] != in[1] || !singleton_after(in[0], 2))
      c.fail("bottoms 0 and 1 must both be (N, C) or (N, C, 1, 1), got {} and {}", shape_str(in[0]), shape_str(in[1]));
    if (in[2].empty() || in[2][0] != in[0][0] || !singleton_after(in[2], 1))
      c.fail("bottom 2 must hold one similarity label per pair ({} pairs), got shape {}", in[0][0], shape_str(in[2]));
    out[0] = {};
  }
  // Gradients for both halves of each pair, not the labels.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.default_loss_weight = 1.f;
    f.can_propagate_to = {true, true, false};
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::loss}); }
};

class ContrastiveLossKernel final : public Kernel {
 public:
  explicit ContrastiveLossKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<ContrastiveLossAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    num_ = in[0][0];
    ch_ = shape_numel(in[0]) / num_;
    diff_.reshape(in[0]);
    dist_sq_.reshape({num_});
  }
  void forward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* b = c.in[1]->f32();
    const float* y = c.in[2]->f32();
    float* d = diff_.f32();
    double loss = 0;
    for (int64_t i = 0; i < num_; ++i) {
      float sq = 0.f;
      for (int64_t k = i * ch_; k < (i + 1) * ch_; ++k) {
        d[k] = a[k] - b[k];
        sq += d[k] * d[k];
      }
      dist_sq_.f32()[i] = sq;
      if (similar(y[i])) {
        loss += sq;
      } else if (a_.legacy_version) {
        loss += std::max(a_.margin - sq, 0.f);
      } else {
        float m = std::max(a_.margin - std::sqrt(sq), 0.f);
        loss += static_cast<double>(m) * m;
      }
    }
    c.out[0]->f32()[0] = static_cast<float>(loss / static_cast<double>(num_) / 2.0);
  }
  void backward(OpCall& c) override {
    const float* y = c.in[2]->f32();
    const float* d = diff_.f32();
    for (int side = 0; side < 2; ++side) {
      if (!c.in_grad[side]) continue;
      float* dx = c.in_grad[side]->f32();
      float alpha = (side == 0 ? 1.f : -1.f) * c.out_grad[0]->f32()[0] / static_cast<float>(num_);
      for (int64_t i = 0; i < num_; ++i) {
        float coef = alpha;  // similar pairs
        if (!similar(y[i])) {
          float mdist, beta;
          if (a_.legacy_version) {
            mdist = a_.margin - dist_sq_.f32()[i];
            beta = -alpha;
          } else {
            // Caffe's 1e-4 keeps the division finite for coincident pairs.
            float dist = std::sqrt(dist_sq_.f32()[i]);
            mdist = a_.margin - dist;
            beta = -alpha * mdist / (dist + 1e-4f);
          }
          coef = mdist > 0.f ? beta : 0.f;
        }
        for (int64_t k = i * ch_; k < (i + 1) * ch_; ++k) dx[k] = coef * d[k];
      }
    }
  }

 private:
  // Caffe truncates the label to an integer: 0.5 counts as dissimilar.
  static bool similar(float y) { return static_cast<int>(y) != 0; }
  ContrastiveLossAttrs a_;
  int64_t num_ = 1, ch_ = 1;
  Tensor diff_, dist_sq_;
};

}  // namespace

BKS_REGISTER_OP_DEF("ContrastiveLoss", ContrastiveLossDef);
BKS_REGISTER_KERNEL("ContrastiveLoss", ::bks::DeviceKind::cpu, ContrastiveLossKernel, "loops", kReferencePriority,
                    nullptr);

}  // namespace bks
