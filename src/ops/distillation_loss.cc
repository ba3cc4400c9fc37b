// DistillationLoss: knowledge distillation's soft-target term (Hinton et al., 2015), which
// train --teacher adds (passes/insert_distillation.cc). Bottom 0 holds the student's class
// scores, bottom 1 the teacher's for the same items, softmax over axis 1 (N x C, or
// N x C x spatial positions). With p = softmax(z / T):
//   loss = T^2 * sum KL(p_teacher || p_student) / (items x positions)
// T^2 keeps the gradient's size independent of T, so the mix with the true-label loss means
// the same at every temperature; the gradient reaches the student only:
//   d loss / d z_student = T * (p_student - p_teacher) / (items x positions).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/op.h"

namespace bks {
namespace {

struct DistillationAttrs final : AttrsOf<DistillationAttrs> {
  float temperature = 4.f;
  void visit(AttrVisitor& v) override { v.field("temperature", temperature); }
};
void distillation_from_caffe(const proto::LayerParameter& l, DistillationAttrs& a, const std::string&) {
  a.temperature = l.distillation_param().temperature();
}
void distillation_to_caffe(const DistillationAttrs& a, proto::LayerParameter& l) {
  l.mutable_distillation_param()->set_temperature(a.temperature);
}
BKS_REGISTER_ATTRS("DistillationLoss", DistillationAttrs, distillation_from_caffe, distillation_to_caffe);

float temperature_of(const OpContext& c) {
  const float t = c.node.attrs.as<DistillationAttrs>().temperature;
  if (!(t > 0.f && t <= 1e4f)) c.fail("distillation_param.temperature must be in (0, 10000], got {}", t);
  return t;
}

class DistillationLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override { temperature_of(c); }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (in[0].size() < 2 || in[0][0] <= 0 || in[0][1] <= 0)
      c.fail("bottom 0 needs items and classes (N x C ...), got shape {}", shape_str(in[0]));
    if (in[1] != in[0])
      c.fail("the teacher's scores (bottom 1) have shape {}, the student's (bottom 0) {}: they must match",
             shape_str(in[1]), shape_str(in[0]));
    out[0] = {};
  }
  // A gradient for the student's scores; the teacher's are given.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override { return loss_facts(in.size()); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::loss}); }
};

class DistillationLossKernel final : public Kernel {
 public:
  explicit DistillationLossKernel(const OpInit& i) : Kernel(i), t_(temperature_of(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    items_ = in[0][0];
    classes_ = in[0][1];
    positions_ = shape_numel(in[0]) / (items_ * classes_);
    student_.resize(static_cast<size_t>(classes_));
    teacher_.resize(static_cast<size_t>(classes_));
  }

  void forward(OpCall& c) override {
    double kl = 0;
    for_each_row(c, [&](const float* ls, const float* lt, int64_t) {
      for (int64_t k = 0; k < classes_; ++k) kl += std::exp(lt[k]) * (static_cast<double>(lt[k]) - ls[k]);
    });
    c.out[0]->f32()[0] = static_cast<float>(t_ * t_ * kl / static_cast<double>(items_ * positions_));
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    float* dz = c.in_grad[0]->f32();
    const float scale = c.out_grad[0]->f32()[0] * t_ / static_cast<float>(items_ * positions_);
    for_each_row(c, [&](const float* ls, const float* lt, int64_t first) {
      for (int64_t k = 0; k < classes_; ++k) dz[first + k * positions_] = scale * (std::exp(ls[k]) - std::exp(lt[k]));
    });
  }

 private:
  // Calls f with the log-softmax at temperature T of the student's and the teacher's scores
  // at each item and position (and where class 0 of it is).
  template <class F>
  void for_each_row(OpCall& c, F f) {
    const float* zs = c.in[0]->f32();
    const float* zt = c.in[1]->f32();
    for (int64_t n = 0; n < items_; ++n)
      for (int64_t p = 0; p < positions_; ++p) {
        const int64_t first = n * classes_ * positions_ + p;
        log_softmax(zs, first, student_);
        log_softmax(zt, first, teacher_);
        f(student_.data(), teacher_.data(), first);
      }
  }

  void log_softmax(const float* z, int64_t first, std::vector<float>& out) const {
    float top = -INFINITY;
    for (int64_t k = 0; k < classes_; ++k) top = std::max(top, z[first + k * positions_] / t_);
    double sum = 0;
    for (int64_t k = 0; k < classes_; ++k) sum += std::exp(z[first + k * positions_] / t_ - top);
    const float log_sum = top + static_cast<float>(std::log(sum));
    for (int64_t k = 0; k < classes_; ++k) out[static_cast<size_t>(k)] = z[first + k * positions_] / t_ - log_sum;
  }

  float t_;
  int64_t items_ = 0, classes_ = 0, positions_ = 1;
  std::vector<float> student_, teacher_;
};

}  // namespace

BKS_REGISTER_OP_DEF("DistillationLoss", DistillationLossDef);
BKS_REGISTER_KERNEL("DistillationLoss", ::bks::DeviceKind::cpu, DistillationLossKernel, "loops",
                    ::bks::kReferencePriority, nullptr);

}  // namespace bks
