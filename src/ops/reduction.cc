// Reduction (SUM, ASUM, SUMSQ, MEAN over the axes from `axis` on, times coeff) and ArgMax.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kReductionOps[] = {"SUM", "ASUM", "SUMSQ", "MEAN"};

struct ReductionAttrs final : AttrsOf<ReductionAttrs> {
  enum Operation { sum, asum, sumsq, mean };  // Caffe's ReductionOp - 1
  int operation = sum;
  int64_t axis = 0;  // reduces the axes from here to the last
  float coeff = 1.f;
  void visit(AttrVisitor& v) override {
    v.field("operation", operation, kReductionOps);
    v.field("axis", axis);
    v.field("coeff", coeff);
  }
};
void reduction_from_caffe(const proto::LayerParameter& l, ReductionAttrs& a, const std::string&) {
  const proto::ReductionParameter& p = l.reduction_param();
  a.operation = static_cast<int>(p.operation()) - 1;
  a.axis = p.axis();
  a.coeff = p.coeff();
}
void reduction_to_caffe(const ReductionAttrs& a, proto::LayerParameter& l) {
  proto::ReductionParameter* p = l.mutable_reduction_param();
  p->set_operation(static_cast<proto::ReductionParameter::ReductionOp>(a.operation + 1));
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_coeff(a.coeff);
}
BKS_REGISTER_ATTRS("Reduction", ReductionAttrs, reduction_from_caffe, reduction_to_caffe);

struct ArgMaxAttrs final : AttrsOf<ArgMaxAttrs> {
  bool out_max_val = false;
  int64_t top_k = 1;
  // Ranks along `axis`; otherwise over each item's flattened values (Caffe: no axis given).
  bool use_axis = false;
  int64_t axis = 0;
  void visit(AttrVisitor& v) override {
    v.field("out_max_val", out_max_val);
    v.field("top_k", top_k);
    v.field("use_axis", use_axis);
    v.field("axis", axis);
  }
};
void argmax_from_caffe(const proto::LayerParameter& l, ArgMaxAttrs& a, const std::string&) {
  const proto::ArgMaxParameter& p = l.argmax_param();
  a.out_max_val = p.out_max_val();
  a.top_k = p.top_k();
  if (p.has_axis()) {
    a.use_axis = true;
    a.axis = p.axis();
  }
}
void argmax_to_caffe(const ArgMaxAttrs& a, proto::LayerParameter& l) {
  proto::ArgMaxParameter* p = l.mutable_argmax_param();
  p->set_out_max_val(a.out_max_val);
  p->set_top_k(static_cast<uint32_t>(a.top_k));
  p->clear_axis();
  if (a.use_axis) p->set_axis(static_cast<int32_t>(a.axis));
}
BKS_REGISTER_ATTRS("ArgMax", ArgMaxAttrs, argmax_from_caffe, argmax_to_caffe);

// Reduction: the input as (outer, dim), reduced over dim, with the output shape.
struct ReductionGeometry {
  int64_t outer = 1, dim = 1;
  Shape out;
};

ReductionGeometry reduction_geometry(const OpContext& c, const Shape& s) {
  int nd = static_cast<int>(s.size());
  int64_t a = c.node.attrs.as<ReductionAttrs>().axis;
  int axis = a == nd ? nd : canonical_axis(a, nd, "reduction_param.axis");
  return {shape_count(s, 0, axis), shape_count(s, axis, nd), Shape(s.begin(), s.begin() + axis)};
}

// ArgMax: the input as (outer, dim, inner), ranked over dim, with the output shape.
struct ArgMaxGeometry {
  int64_t outer = 1, dim = 1, inner = 1;
  bool with_val = false;  // without an axis, out_max_val puts the values after the indices
  Shape out;
};

ArgMaxGeometry argmax_geometry(const OpContext& c, const Shape& s) {
  const ArgMaxAttrs& p = c.node.attrs.as<ArgMaxAttrs>();
  int nd = static_cast<int>(s.size());
  int64_t k = p.top_k;
  ArgMaxGeometry g;
  if (p.use_axis) {
    int axis = canonical_axis(p.axis, nd, "argmax_param.axis");
    g.outer = shape_count(s, 0, axis);
    g.dim = s[axis];
    g.inner = shape_count(s, axis + 1, nd);
    g.out = s;
    g.out[axis] = k;
    g.with_val = false;
  } else {
    g.outer = s[0];
    g.dim = shape_count(s, 1, nd);
    g.inner = 1;
    g.out = {g.outer, p.out_max_val ? 2 : 1, k};
    g.with_val = p.out_max_val;
  }
  if (k > g.dim) c.fail("top_k {} exceeds the {} values it ranks", k, g.dim);
  return g;
}

// ---- Definitions ----

class ReductionDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = reduction_geometry(c, in[0]).out;
  }
};

class ArgMaxDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    if (c.node.attrs.as<ArgMaxAttrs>().top_k < 1) c.fail("argmax_param.top_k must be at least 1");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = argmax_geometry(c, in[0]).out;
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
};

// ---- Kernels ----

class ReductionKernel final : public Kernel {
 public:
  explicit ReductionKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<ReductionAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    ReductionGeometry g = reduction_geometry(context(), in[0]);
    outer_ = g.outer;
    dim_ = g.dim;
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    for (int64_t o = 0; o < outer_; ++o) {
      double s = 0;
      const float* p = x + o * dim_;
      for (int64_t i = 0; i < dim_; ++i) {
        switch (a_.operation) {
          case ReductionAttrs::asum: s += std::fabs(p[i]); break;
          case ReductionAttrs::sumsq: s += static_cast<double>(p[i]) * p[i]; break;
          default: s += p[i];
        }
      }
      if (a_.operation == ReductionAttrs::mean) s /= static_cast<double>(dim_);
      y[o] = static_cast<float>(s * a_.coeff);
    }
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for (int64_t o = 0; o < outer_; ++o) {
      float g = dy[o] * a_.coeff;
      if (a_.operation == ReductionAttrs::mean) g /= static_cast<float>(dim_);
      for (int64_t i = 0; i < dim_; ++i) {
        float xi = x[o * dim_ + i];
        switch (a_.operation) {
          case ReductionAttrs::asum: dx[o * dim_ + i] = g * static_cast<float>((xi > 0) - (xi < 0)); break;
          case ReductionAttrs::sumsq: dx[o * dim_ + i] = 2.f * g * xi; break;
          default: dx[o * dim_ + i] = g;
        }
      }
    }
  }

 private:
  ReductionAttrs a_;
  int64_t outer_ = 1, dim_ = 1;
};

class ArgMaxKernel final : public Kernel {
 public:
  explicit ArgMaxKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<ArgMaxAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    ArgMaxGeometry g = argmax_geometry(context(), in[0]);
    outer_ = g.outer;
    dim_ = g.dim;
    inner_ = g.inner;
    with_val_ = g.with_val;
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    int64_t k = a_.top_k;
    std::vector<int64_t> idx(static_cast<size_t>(dim_));
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        auto val = [&](int64_t d) { return x[(o * dim_ + d) * inner_ + i]; };
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int64_t a, int64_t b) { return val(a) > val(b) || (val(a) == val(b) && a < b); });
        for (int64_t j = 0; j < k; ++j) {
          if (a_.use_axis) {
            y[(o * k + j) * inner_ + i] = a_.out_max_val ? val(idx[j]) : static_cast<float>(idx[j]);
          } else {
            y[o * (with_val_ ? 2 : 1) * k + j] = static_cast<float>(idx[j]);
            if (with_val_) y[o * 2 * k + k + j] = val(idx[j]);
          }
        }
      }
  }

 private:
  ArgMaxAttrs a_;
  int64_t outer_ = 1, dim_ = 1, inner_ = 1;
  bool with_val_ = false;
};

}  // namespace

BKS_REGISTER_OP_DEF("Reduction", ReductionDef);
BKS_REGISTER_OP_DEF("ArgMax", ArgMaxDef);

BKS_REGISTER_KERNEL("Reduction", ::bks::DeviceKind::cpu, ReductionKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("ArgMax", ::bks::DeviceKind::cpu, ArgMaxKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
