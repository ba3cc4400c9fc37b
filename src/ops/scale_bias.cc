// Scale (y = x * s [+ b]) and Bias (y = x + b), broadcasting a blob over the axes
// [axis, axis + num_axes) of the input. The factor is a learned blob, or the second bottom.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct Broadcast {
  int64_t outer = 1, dim = 1, inner = 1;
};

// Geometry of broadcasting a blob of shape `b` into `x` starting at `axis`.
Broadcast broadcast_geometry(const Shape& x, const Shape& b, int axis) {
  return {shape_count(x, 0, axis), shape_numel(b), shape_count(x, axis + static_cast<int>(b.size()), static_cast<int>(x.size()))};
}

// The shape of the learned blob, or a check of the second bottom's shape.
Shape factor_shape(const Op& op, const std::vector<Shape>& in, int axis_param, int num_axes, int& axis) {
  const Shape& x = in[0];
  int nd = static_cast<int>(x.size());
  if (in.size() > 1) {
    const Shape& b = in[1];
    axis = b.empty() && axis_param == 1 ? 0 : canonical_axis(axis_param, nd, "axis");
    if (axis + static_cast<int>(b.size()) > nd) throw InputError(op.where() + ": second bottom " + shape_str(b) + " does not fit " + shape_str(x));
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i] != x[axis + i])
        throw InputError(op.where() + ": second bottom " + shape_str(b) + " does not match " + shape_str(x) +
                         " from axis " + std::to_string(axis));
    return b;
  }
  axis = canonical_axis(axis_param, nd, "axis");
  if (num_axes < -1) throw InputError(op.where() + ": num_axes must be -1 or more");
  int end = num_axes == -1 ? nd : axis + num_axes;
  if (end > nd) throw InputError(op.where() + ": num_axes " + std::to_string(num_axes) + " exceeds " + shape_str(x));
  return Shape(x.begin() + axis, x.begin() + end);
}

void scale_forward(const Broadcast& g, const float* x, const float* s, const float* b, float* y) {
#pragma omp parallel for collapse(2) if (g.outer * g.dim * g.inner > 32768)
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t d = 0; d < g.dim; ++d) {
      int64_t off = (o * g.dim + d) * g.inner;
      float sv = s ? s[d] : 1.f, bv = b ? b[d] : 0.f;
      for (int64_t i = 0; i < g.inner; ++i) y[off + i] = x[off + i] * sv + bv;
    }
}

// Sum over outer and inner of f(offset) per d.
template <class F>
void reduce_per_dim(const Broadcast& g, float* out, F&& f) {
  for (int64_t d = 0; d < g.dim; ++d) {
    double acc = 0;
    for (int64_t o = 0; o < g.outer; ++o) {
      int64_t off = (o * g.dim + d) * g.inner;
      for (int64_t i = 0; i < g.inner; ++i) acc += f(off + i);
    }
    out[d] = static_cast<float>(acc);
  }
}

class ScaleOp final : public Op {
 public:
  explicit ScaleOp(const OpInit& i) : Op(i), p_(i.node.param.scale_param()) {}
  int min_inputs() const override { return 1; }
  int max_inputs() const override { return 2; }
  // In place, the input is copied before it is overwritten (its gradient needs x).
  bool allows_inplace() const override { return true; }
  bool backward_reads_input() const override { return false; }
  // The factor, when it is the second bottom, is read again for the input gradient.
  bool backward_reads_input_at(int input) const override { return input == 1; }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    fshape_ = factor_shape(*this, in, p_.axis(), p_.num_axes(), axis_);
    g_ = broadcast_geometry(in[0], fshape_, axis_);
    two_bottoms_ = in.size() > 1;
    out[0] = in[0];
    if (phase_ == proto::TRAIN) xcopy_.reshape(in[0]);
  }
  std::vector<ParamDecl> declare_params(const std::vector<Shape>& in) override {
    std::vector<ParamDecl> d;
    if (!two_bottoms_) {
      proto::FillerParameter one;
      one.set_value(1.f);
      d.push_back({fshape_, p_.has_filler() ? p_.filler() : one, true});
    }
    if (p_.bias_term()) d.push_back({fshape_, p_.bias_filler(), true});
    return d;
  }

  void forward(OpCall& c) override {
    const float* s = two_bottoms_ ? c.in[1]->f32() : c.params[0]->f32();
    const float* b = p_.bias_term() ? c.params[two_bottoms_ ? 0 : 1]->f32() : nullptr;
    if (phase_ == proto::TRAIN) std::memcpy(xcopy_.f32(), c.in[0]->f32(), xcopy_.bytes());
    scale_forward(g_, c.in[0]->f32(), s, b, c.out[0]->f32());
  }

  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    const float* x = xcopy_.f32();
    const float* s = two_bottoms_ ? c.in[1]->f32() : c.params[0]->f32();
    Tensor* ds = two_bottoms_ ? c.in_grad[1] : c.param_grad[0];
    if (ds) reduce_per_dim(g_, ds->f32(), [&](int64_t j) { return static_cast<double>(dy[j]) * x[j]; });
    if (p_.bias_term()) {
      Tensor* db = c.param_grad[two_bottoms_ ? 0 : 1];
      if (db) reduce_per_dim(g_, db->f32(), [&](int64_t j) { return static_cast<double>(dy[j]); });
    }
    if (c.in_grad[0]) scale_forward(g_, dy, s, nullptr, c.in_grad[0]->f32());
  }

 private:
  proto::ScaleParameter p_;
  Shape fshape_;
  int axis_ = 1;
  bool two_bottoms_ = false;
  Broadcast g_;
  Tensor xcopy_;
};

class BiasOp final : public Op {
 public:
  explicit BiasOp(const OpInit& i) : Op(i), p_(i.node.param.bias_param()) {}
  int min_inputs() const override { return 1; }
  int max_inputs() const override { return 2; }
  bool allows_inplace() const override { return true; }
  bool backward_reads_input() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    fshape_ = factor_shape(*this, in, p_.axis(), p_.num_axes(), axis_);
    g_ = broadcast_geometry(in[0], fshape_, axis_);
    two_bottoms_ = in.size() > 1;
    out[0] = in[0];
  }
  std::vector<ParamDecl> declare_params(const std::vector<Shape>&) override {
    if (two_bottoms_) return {};
    return {{fshape_, p_.filler(), true}};
  }
  void forward(OpCall& c) override {
    const float* b = two_bottoms_ ? c.in[1]->f32() : c.params[0]->f32();
    scale_forward(g_, c.in[0]->f32(), nullptr, b, c.out[0]->f32());
  }
  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    Tensor* db = two_bottoms_ ? c.in_grad[1] : c.param_grad[0];
    if (db) reduce_per_dim(g_, db->f32(), [&](int64_t j) { return static_cast<double>(dy[j]); });
    if (c.in_grad[0] && c.in_grad[0]->raw() != dy) std::memcpy(c.in_grad[0]->f32(), dy, c.in_grad[0]->bytes());
  }

 private:
  proto::BiasParameter p_;
  Shape fshape_;
  int axis_ = 1;
  bool two_bottoms_ = false;
  Broadcast g_;
};

}  // namespace

BKS_REGISTER_OP("Scale", ScaleOp);
BKS_REGISTER_OP("Bias", BiasOp);

}  // namespace bks
