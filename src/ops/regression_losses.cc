// EuclideanLoss (sum of squared differences / 2N) and SigmoidCrossEntropyLoss.
#include <cmath>

#include "ops/loss_util.h"
#include "ops/op.h"

namespace bks {
namespace {

// EuclideanLoss takes no attributes (Caffe's ignores loss_param); SigmoidCrossEntropyLoss
// takes loss_param, normalising by the batch size unless told otherwise.
struct SigmoidCrossEntropyLossAttrs final : AttrsOf<SigmoidCrossEntropyLossAttrs> {
  LossSpec loss;
  SigmoidCrossEntropyLossAttrs() { loss.normalization = LossSpec::batch_size; }
  void visit(AttrVisitor& v) override { v.field("loss", loss); }
};

void sigmoid_loss_from_caffe(const proto::LayerParameter& l, SigmoidCrossEntropyLossAttrs& a, const std::string&) {
  a.loss = loss_from_caffe(l, LossSpec::batch_size);
}
void sigmoid_loss_to_caffe(const SigmoidCrossEntropyLossAttrs& a, proto::LayerParameter& l) {
  loss_to_caffe(a.loss, l);
}
BKS_REGISTER_ATTRS("SigmoidCrossEntropyLoss", SigmoidCrossEntropyLossAttrs, sigmoid_loss_from_caffe,
                   sigmoid_loss_to_caffe);

// Items of a batch: the first axis (1 for a scalar).
int64_t batch_items(const Shape& s) { return s.empty() ? 1 : s[0]; }

// ---- Definitions ----

class EuclideanLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (shape_numel(in[0]) != shape_numel(in[1]))
      c.fail("bottoms must have the same count: {} vs {}", shape_str(in[0]), shape_str(in[1]));
    out[0] = {};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.default_loss_weight = 1.f;
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::loss}); }
};

class SigmoidCrossEntropyLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (shape_numel(in[0]) != shape_numel(in[1]))
      c.fail("prediction and target counts differ: {} vs {}", shape_str(in[0]), shape_str(in[1]));
    out[0] = {};
  }
  // A gradient for the prediction, not the targets.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override { return loss_facts(in.size()); }
  OpTraits traits(const Node&) const override {
    OpTraits t;
    t.loss = true;
    t.inference_form = "Sigmoid";
    return t;
  }
  void to_inference_form(Node& n) const override { become(n, "Sigmoid"); }
};

// ---- Kernels ----

class EuclideanLossKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    diff_.reshape(in[0]);
    n_ = batch_items(in[0]);
  }
  void forward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* b = c.in[1]->f32();
    float* d = diff_.f32();
    double s = 0;
    for (int64_t i = 0; i < diff_.numel(); ++i) {
      d[i] = a[i] - b[i];
      s += static_cast<double>(d[i]) * d[i];
    }
    c.out[0]->f32()[0] = static_cast<float>(s / n_ / 2.0);
  }
  void backward(OpCall& c) override {
    float g = c.out_grad[0]->f32()[0] / static_cast<float>(n_);
    for (int k = 0; k < 2; ++k) {
      if (!c.in_grad[k]) continue;
      float* dx = c.in_grad[k]->f32();
      float sign = k == 0 ? g : -g;
      for (int64_t i = 0; i < diff_.numel(); ++i) dx[i] = sign * diff_.f32()[i];
    }
  }

 private:
  Tensor diff_;
  int64_t n_ = 1;
};

class SigmoidCrossEntropyLossKernel final : public Kernel {
 public:
  explicit SigmoidCrossEntropyLossKernel(const OpInit& i)
      : Kernel(i),
        mode_(i.node.attrs.as<SigmoidCrossEntropyLossAttrs>().loss.normalization),
        ignore_(IgnoreLabel::from(i.node.attrs.as<SigmoidCrossEntropyLossAttrs>().loss)) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    outer_ = batch_items(in[0]);
    count_ = shape_numel(in[0]);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* t = c.in[1]->f32();
    double loss = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < count_; ++i) {
      if (ignore_.skips(t[i])) continue;
      // Stable form of -[t log s(x) + (1 - t) log(1 - s(x))].
      loss += std::max(x[i], 0.f) - x[i] * t[i] + std::log1p(std::exp(-std::fabs(x[i])));
      ++valid;
    }
    valid_ = valid;
    c.out[0]->f32()[0] = static_cast<float>(loss / loss_normalizer(mode_, outer_, count_ / outer_, valid));
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* t = c.in[1]->f32();
    float* dx = c.in_grad[0]->f32();
    float g = c.out_grad[0]->f32()[0] / loss_normalizer(mode_, outer_, count_ / outer_, valid_);
    for (int64_t i = 0; i < count_; ++i) {
      if (ignore_.skips(t[i])) {
        dx[i] = 0.f;
        continue;
      }
      dx[i] = g * (1.f / (1.f + std::exp(-x[i])) - t[i]);
    }
  }

 private:
  int mode_;  // LossSpec::Normalization
  IgnoreLabel ignore_;
  int64_t outer_ = 1, count_ = 0, valid_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("EuclideanLoss", EuclideanLossDef);
BKS_REGISTER_OP_DEF("SigmoidCrossEntropyLoss", SigmoidCrossEntropyLossDef);

BKS_REGISTER_KERNEL("EuclideanLoss", ::bks::DeviceKind::cpu, EuclideanLossKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("SigmoidCrossEntropyLoss", ::bks::DeviceKind::cpu, SigmoidCrossEntropyLossKernel, "loops",
                    kReferencePriority, nullptr);

}  // namespace bks
