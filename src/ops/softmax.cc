// Softmax, and SoftmaxWithLoss (softmax + multinomial logistic loss, with ignore_label,
// Caffe's normalisation modes and SegNet's per-class weights).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "ops/loss_util.h"
#include "ops/op.h"

namespace bks {
namespace {

struct SoftmaxAttrs final : AttrsOf<SoftmaxAttrs> {
  int64_t axis = 1;
  void visit(AttrVisitor& v) override { v.field("axis", axis); }
};

void softmax_from_caffe(const proto::LayerParameter& l, SoftmaxAttrs& a, const std::string&) {
  a.axis = l.softmax_param().axis();
}
void softmax_to_caffe(const SoftmaxAttrs& a, proto::LayerParameter& l) {
  l.mutable_softmax_param()->set_axis(static_cast<int32_t>(a.axis));
}
BKS_REGISTER_ATTRS("Softmax", SoftmaxAttrs, softmax_from_caffe, softmax_to_caffe);

// The prediction's softmax (softmax_param) and the loss (loss_param).
struct SoftmaxWithLossAttrs final : AttrsOf<SoftmaxWithLossAttrs> {
  int64_t axis = 1;
  LossSpec loss;
  // SegNet's loss_param.class_weighting (with weight_by_label_freqs): one weight per class,
  // multiplying each item's loss and gradient; empty: unweighted.
  std::vector<float> class_weights;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("loss", loss);
    v.field("class_weights", class_weights);
  }
};

void softmax_loss_from_caffe(const proto::LayerParameter& l, SoftmaxWithLossAttrs& a, const std::string& where) {
  a.axis = l.softmax_param().axis();
  a.loss = loss_from_caffe(l, LossSpec::valid);
  const proto::LossParameter& p = l.loss_param();
  if (p.weight_by_label_freqs()) {
    if (p.class_weighting_size() == 0)
      input_error("{}: loss_param.weight_by_label_freqs needs one class_weighting per class; none given", where);
    a.class_weights.assign(p.class_weighting().begin(), p.class_weighting().end());
  } else if (p.class_weighting_size() > 0) {
    // As in the fork, the weights count only with weight_by_label_freqs.
    log::warn("{}: loss_param.class_weighting ignored: weight_by_label_freqs is not true", where);
  }
}
void softmax_loss_to_caffe(const SoftmaxWithLossAttrs& a, proto::LayerParameter& l) {
  l.mutable_softmax_param()->set_axis(static_cast<int32_t>(a.axis));
  loss_to_caffe(a.loss, l);
  proto::LossParameter* p = l.mutable_loss_param();
  p->clear_weight_by_label_freqs();
  p->clear_class_weighting();
  if (!a.class_weights.empty()) {
    p->set_weight_by_label_freqs(true);
    for (float w : a.class_weights) p->add_class_weighting(w);
  }
}
BKS_REGISTER_ATTRS("SoftmaxWithLoss", SoftmaxWithLossAttrs, softmax_loss_from_caffe, softmax_loss_to_caffe);

// Softmax over `axis` of a tensor viewed as (outer, channels, inner).
void softmax_forward(const float* x, float* y, int64_t outer, int64_t ch, int64_t inner) {
#pragma omp parallel for if (outer * ch * inner > 32768)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float* px = x + o * ch * inner + i;
      float* py = y + o * ch * inner + i;
      float m = -FLT_MAX;
      for (int64_t c = 0; c < ch; ++c) m = std::max(m, px[c * inner]);
      float s = 0.f;
      for (int64_t c = 0; c < ch; ++c) {
        float e = std::exp(px[c * inner] - m);
        py[c * inner] = e;
        s += e;
      }
      float inv = 1.f / s;
      for (int64_t c = 0; c < ch; ++c) py[c * inner] *= inv;
    }
  }
}

struct AxisSplit {
  int64_t outer = 1, ch = 1, inner = 1;
};

// A bottom viewed as (outer, channels, inner) around `axis` (softmax_param.axis).
AxisSplit softmax_split(int64_t axis_attr, const Shape& s) {
  int axis = canonical_axis(axis_attr, static_cast<int>(s.size()), "softmax_param.axis");
  return {shape_count(s, 0, axis), s[axis], shape_count(s, axis + 1, static_cast<int>(s.size()))};
}

// SoftmaxWithLoss's split, checked against the label count and the class weights.
AxisSplit loss_split(const OpContext& c, const std::vector<Shape>& in) {
  const SoftmaxWithLossAttrs& a = c.node.attrs.as<SoftmaxWithLossAttrs>();
  AxisSplit sp = softmax_split(a.axis, in[0]);
  if (shape_numel(in[1]) != sp.outer * sp.inner)
    c.fail("label count {} must equal prediction count {} (shapes {} and {})", shape_numel(in[1]), sp.outer * sp.inner,
           shape_str(in[0]), shape_str(in[1]));
  if (!a.class_weights.empty() && static_cast<int64_t>(a.class_weights.size()) != sp.ch)
    c.fail("loss_param.class_weighting has {} values for {} classes; give one per class", a.class_weights.size(),
           sp.ch);
  return sp;
}

// ---- Definitions ----

class SoftmaxDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    softmax_split(c.node.attrs.as<SoftmaxAttrs>().axis, in[0]);
    out[0] = in[0];
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_output = true;
    f.backward_reads_input = false;
    return f;
  }
};

class SoftmaxWithLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_outputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    loss_split(c, in);
    out[0] = {};
    if (out.size() > 1) out[1] = in[0];
  }
  // A gradient for the prediction, not the labels.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override { return loss_facts(in.size()); }
  OpTraits traits(const Node&) const override {
    OpTraits t;
    t.loss = true;
    t.inference_form = "Softmax";
    return t;
  }
  void to_inference_form(Node& n) const override {
    int64_t axis = n.attrs.as<SoftmaxWithLossAttrs>().axis;
    become(n, "Softmax");
    n.attrs.as<SoftmaxAttrs>().axis = axis;
  }
};

// ---- Kernels ----

class SoftmaxKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    sp_ = softmax_split(node_.attrs.as<SoftmaxAttrs>().axis, in[0]);
  }
  void forward(OpCall& c) override { softmax_forward(c.in[0]->f32(), c.out[0]->f32(), sp_.outer, sp_.ch, sp_.inner); }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* y = c.out[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        int64_t base = o * sp_.ch * sp_.inner + i;
        float dot = 0.f;
        for (int64_t k = 0; k < sp_.ch; ++k) dot += dy[base + k * sp_.inner] * y[base + k * sp_.inner];
        for (int64_t k = 0; k < sp_.ch; ++k) {
          int64_t j = base + k * sp_.inner;
          dx[j] = y[j] * (dy[j] - dot);
        }
      }
  }

 private:
  AxisSplit sp_;
};

class SoftmaxWithLossKernel final : public Kernel {
 public:
  explicit SoftmaxWithLossKernel(const OpInit& i)
      : Kernel(i),
        mode_(i.node.attrs.as<SoftmaxWithLossAttrs>().loss.normalization),
        ignore_(IgnoreLabel::from(i.node.attrs.as<SoftmaxWithLossAttrs>().loss)),
        weights_(i.node.attrs.as<SoftmaxWithLossAttrs>().class_weights) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    sp_ = loss_split(context(), in);
    prob_.reshape(in[0]);
  }

  void forward(OpCall& c) override {
    softmax_forward(c.in[0]->f32(), prob_.f32(), sp_.outer, sp_.ch, sp_.inner);
    const float* p = prob_.f32();
    const float* label = c.in[1]->f32();
    double loss = 0;
    int64_t valid = 0;
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        int l = static_cast<int>(label[o * sp_.inner + i]);
        if (ignore_.skips(l)) continue;
        if (l < 0 || l >= sp_.ch)
          runtime_error("{}: label {} is outside [0, {}) at item {}", where_, l, sp_.ch, o * sp_.inner + i);
        loss -= std::log(std::max(p[(o * sp_.ch + l) * sp_.inner + i], FLT_MIN)) * weight(l);
        ++valid;
      }
    valid_ = valid;
    c.out[0]->f32()[0] = static_cast<float>(loss / loss_normalizer(mode_, sp_.outer, sp_.inner, valid));
    if (c.out.size() > 1) c.out[1]->copy_from(prob_);
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    float* dx = c.in_grad[0]->f32();
    std::memcpy(dx, prob_.f32(), prob_.bytes());
    const float* label = c.in[1]->f32();
    float scale = c.out_grad[0]->f32()[0] / loss_normalizer(mode_, sp_.outer, sp_.inner, valid_);
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        int l = static_cast<int>(label[o * sp_.inner + i]);
        if (ignore_.skips(l)) {
          for (int64_t k = 0; k < sp_.ch; ++k) dx[(o * sp_.ch + k) * sp_.inner + i] = 0.f;
          continue;
        }
        dx[(o * sp_.ch + l) * sp_.inner + i] -= 1.f;
        if (!weights_.empty())
          for (int64_t k = 0; k < sp_.ch; ++k) dx[(o * sp_.ch + k) * sp_.inner + i] *= weights_[l];
      }
    int64_t n = prob_.numel();
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[j] *= scale;
  }

 private:
  // The fork weights each item's loss by its class; the normaliser still counts items.
  double weight(int l) const { return weights_.empty() ? 1.0 : static_cast<double>(weights_[l]); }
  int mode_;  // LossSpec::Normalization
  IgnoreLabel ignore_;
  std::vector<float> weights_;
  AxisSplit sp_;
  Tensor prob_;
  int64_t valid_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("Softmax", SoftmaxDef);
BKS_REGISTER_OP_DEF("SoftmaxWithLoss", SoftmaxWithLossDef);

BKS_REGISTER_KERNEL("Softmax", ::bks::DeviceKind::cpu, SoftmaxKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("SoftmaxWithLoss", ::bks::DeviceKind::cpu, SoftmaxWithLossKernel, "loops", kReferencePriority,
                    nullptr);

}  // namespace bks
