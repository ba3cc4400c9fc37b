// EuclideanLoss (sum of squared differences / 2N) and SigmoidCrossEntropyLoss.
#include <cmath>

#include "ops/loss_util.h"
#include "ops/op.h"

namespace bks {
namespace {

class EuclideanLossOp final : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 2; }
  float default_loss_weight() const override { return 1.f; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    if (shape_numel(in[0]) != shape_numel(in[1]))
      fail("bottoms must have the same count: {} vs {}", shape_str(in[0]), shape_str(in[1]));
    diff_.reshape(in[0]);
    n_ = in[0].empty() ? 1 : in[0][0];
    out[0] = {};
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

class SigmoidCrossEntropyLossOp final : public Op {
 public:
  explicit SigmoidCrossEntropyLossOp(const OpInit& i)
      : Op(i), mode_(loss_mode(i.node.param, proto::LossParameter::BATCH_SIZE)) {
    if (i.node.param.loss_param().has_ignore_label()) {
      has_ignore_ = true;
      ignore_ = i.node.param.loss_param().ignore_label();
    }
  }
  int min_inputs() const override { return 2; }
  float default_loss_weight() const override { return 1.f; }
  bool can_propagate_to(int input) const override { return input == 0; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    if (shape_numel(in[0]) != shape_numel(in[1]))
      fail("prediction and target counts differ: {} vs {}", shape_str(in[0]), shape_str(in[1]));
    outer_ = in[0].empty() ? 1 : in[0][0];
    count_ = shape_numel(in[0]);
    out[0] = {};
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* t = c.in[1]->f32();
    double loss = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < count_; ++i) {
      if (has_ignore_ && static_cast<int>(t[i]) == ignore_) continue;
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
      if (has_ignore_ && static_cast<int>(t[i]) == ignore_) {
        dx[i] = 0.f;
        continue;
      }
      dx[i] = g * (1.f / (1.f + std::exp(-x[i])) - t[i]);
    }
  }

 private:
  proto::LossParameter::NormalizationMode mode_;
  bool has_ignore_ = false;
  int ignore_ = -1;
  int64_t outer_ = 1, count_ = 0, valid_ = 0;
};

}  // namespace

BKS_REGISTER_OP("EuclideanLoss", EuclideanLossOp);
BKS_REGISTER_OP("SigmoidCrossEntropyLoss", SigmoidCrossEntropyLossOp);

}  // namespace bks
