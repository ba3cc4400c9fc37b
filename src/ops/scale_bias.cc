// Scale (y = x * s [+ b]) and Bias (y = x + b), broadcasting a blob over the axes
// [axis, axis + num_axes) of the input. The factor is a learned blob, or the second bottom.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct ScaleAttrs final : AttrsOf<ScaleAttrs> {
  int64_t axis = 1;
  int64_t num_axes = 1;  // -1: to the last axis
  FillerSpec filler;     // of the learned factor (Caffe's default for Scale: constant 1)
  bool bias_term = false;
  FillerSpec bias_filler;
  ScaleAttrs() { filler.value = 1.f; }
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("num_axes", num_axes);
    v.field("filler", filler);
    v.field("bias_term", bias_term);
    v.field("bias_filler", bias_filler);
  }
};

void scale_from_caffe(const proto::LayerParameter& l, ScaleAttrs& a, const std::string&) {
  const proto::ScaleParameter& p = l.scale_param();
  a.axis = p.axis();
  a.num_axes = p.num_axes();
  if (p.has_filler()) a.filler = filler_from_caffe(p.filler());
  a.bias_term = p.bias_term();
  a.bias_filler = filler_from_caffe(p.bias_filler());
}
void scale_to_caffe(const ScaleAttrs& a, proto::LayerParameter& l) {
  proto::ScaleParameter* p = l.mutable_scale_param();
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_num_axes(static_cast<int32_t>(a.num_axes));
  *p->mutable_filler() = filler_to_caffe(a.filler);
  p->set_bias_term(a.bias_term);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
}
BKS_REGISTER_ATTRS("Scale", ScaleAttrs, scale_from_caffe, scale_to_caffe);

struct BiasAttrs final : AttrsOf<BiasAttrs> {
  int64_t axis = 1;
  int64_t num_axes = 1;
  FillerSpec filler;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("num_axes", num_axes);
    v.field("filler", filler);
  }
};

void bias_from_caffe(const proto::LayerParameter& l, BiasAttrs& a, const std::string&) {
  const proto::BiasParameter& p = l.bias_param();
  a.axis = p.axis();
  a.num_axes = p.num_axes();
  a.filler = filler_from_caffe(p.filler());
}
void bias_to_caffe(const BiasAttrs& a, proto::LayerParameter& l) {
  proto::BiasParameter* p = l.mutable_bias_param();
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_num_axes(static_cast<int32_t>(a.num_axes));
  *p->mutable_filler() = filler_to_caffe(a.filler);
}
BKS_REGISTER_ATTRS("Bias", BiasAttrs, bias_from_caffe, bias_to_caffe);

struct Broadcast {
  int64_t outer = 1, dim = 1, inner = 1;
};

// Geometry of broadcasting a blob of shape `b` into `x` starting at `axis`.
Broadcast broadcast_geometry(const Shape& x, const Shape& b, int axis) {
  return {shape_count(x, 0, axis), shape_numel(b),
          shape_count(x, axis + static_cast<int>(b.size()), static_cast<int>(x.size()))};
}

// The shape of the learned blob, or a check of the second bottom's shape.
Shape factor_shape(const OpContext& c, const std::vector<Shape>& in, int64_t axis_param, int64_t num_axes, int& axis) {
  const Shape& x = in[0];
  int nd = static_cast<int>(x.size());
  if (in.size() > 1) {
    const Shape& b = in[1];
    axis = b.empty() && axis_param == 1 ? 0 : canonical_axis(axis_param, nd, "axis");
    if (axis + static_cast<int>(b.size()) > nd) c.fail("second bottom {} does not fit {}", shape_str(b), shape_str(x));
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i] != x[axis + i])
        c.fail("second bottom {} does not match {} from axis {}", shape_str(b), shape_str(x), axis);
    return b;
  }
  axis = canonical_axis(axis_param, nd, "axis");
  if (num_axes < -1) c.fail("num_axes must be -1 or more");
  int64_t end = num_axes == -1 ? nd : axis + num_axes;
  if (end > nd) c.fail("num_axes {} exceeds {}", num_axes, shape_str(x));
  return Shape(x.begin() + axis, x.begin() + end);
}

// How a Scale's or Bias's factor (blob or second bottom) broadcasts over the input.
struct FactorGeometry {
  Shape shape;  // the factor's
  Broadcast g;
  bool two_bottoms = false;  // the factor is the second bottom, not a blob
};

FactorGeometry factor_geometry(const OpContext& c, const std::vector<Shape>& in, int64_t axis_param, int64_t num_axes) {
  FactorGeometry f;
  int axis = 1;
  f.shape = factor_shape(c, in, axis_param, num_axes, axis);
  f.g = broadcast_geometry(in[0], f.shape, axis);
  f.two_bottoms = in.size() > 1;
  return f;
}

FactorGeometry scale_geometry(const OpContext& c, const std::vector<Shape>& in) {
  const ScaleAttrs& a = c.node.attrs.as<ScaleAttrs>();
  return factor_geometry(c, in, a.axis, a.num_axes);
}

FactorGeometry bias_geometry(const OpContext& c, const std::vector<Shape>& in) {
  const BiasAttrs& a = c.node.attrs.as<BiasAttrs>();
  return factor_geometry(c, in, a.axis, a.num_axes);
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

// A blob over axis 1 alone (one bottom): per channel.
ChannelFlow factor_channel_flow(const Node& n, const std::vector<Shape>& in, int64_t axis, int64_t num_axes) {
  if (in.size() != 1 || in[0].size() < 2 || num_axes != 1) return ChannelFlow::blocks;
  return axis == 1 || axis + static_cast<int64_t>(in[0].size()) == 1 ? ChannelFlow::per_channel : ChannelFlow::blocks;
}

class ScaleDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    scale_geometry(c, in);
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const ScaleAttrs& a = c.node.attrs.as<ScaleAttrs>();
    FactorGeometry f = scale_geometry(c, in);
    std::vector<ParamDecl> d;
    if (!f.two_bottoms) d.push_back({f.shape, a.filler, true});
    if (a.bias_term) d.push_back({f.shape, a.bias_filler, true});
    return d;
  }
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const override {
    const ScaleAttrs& a = n.attrs.as<ScaleAttrs>();
    return factor_channel_flow(n, in, a.axis, a.num_axes);
  }
  // In place, the input is copied before it is overwritten (its gradient needs x). The
  // factor, when it is the second bottom, is read again for the input gradient.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.allows_inplace = true;
    f.backward_reads_input = false;
    for (size_t i = 0; i < in.size(); ++i) f.reads_input_in_backward.push_back(i == 1);
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::per_channel_affine}); }
  // One learned factor (and bias) per channel of axis 1.
  bool channel_affine(const Node& n, const std::vector<const Tensor*>& blobs, int64_t channels, std::vector<double>& a,
                      std::vector<double>& b) const override {
    const ScaleAttrs& sp = n.attrs.as<ScaleAttrs>();
    if (n.inputs.size() != 1 || sp.axis != 1 || sp.num_axes != 1 || blobs.empty()) return false;
    const Tensor& gamma = *blobs[0];
    if (gamma.numel() != channels || (sp.bias_term && blobs.size() < 2)) return false;
    a.assign(channels, 1.0);
    b.assign(channels, 0.0);
    for (int64_t c = 0; c < channels; ++c) a[c] = gamma.f32()[c];
    if (sp.bias_term)
      for (int64_t c = 0; c < channels; ++c) b[c] = blobs[1]->f32()[c];
    return true;
  }
};

class BiasDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    bias_geometry(c, in);
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    FactorGeometry f = bias_geometry(c, in);
    if (f.two_bottoms) return {};
    return {{f.shape, c.node.attrs.as<BiasAttrs>().filler, true}};
  }
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const override {
    const BiasAttrs& a = n.attrs.as<BiasAttrs>();
    return factor_channel_flow(n, in, a.axis, a.num_axes);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.allows_inplace = true;
    f.backward_reads_input = false;
    return f;
  }
};

class ScaleKernel final : public Kernel {
 public:
  explicit ScaleKernel(const OpInit& i) : Kernel(i), bias_term_(i.node.attrs.as<ScaleAttrs>().bias_term) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    FactorGeometry f = scale_geometry(context(), in);
    g_ = f.g;
    two_bottoms_ = f.two_bottoms;
    if (phase_ == proto::TRAIN) xcopy_.reshape(in[0]);
  }

  void forward(OpCall& c) override {
    const float* s = two_bottoms_ ? c.in[1]->f32() : c.params[0]->f32();
    const float* b = bias_term_ ? c.params[two_bottoms_ ? 0 : 1]->f32() : nullptr;
    if (phase_ == proto::TRAIN) std::memcpy(xcopy_.f32(), c.in[0]->f32(), xcopy_.bytes());
    scale_forward(g_, c.in[0]->f32(), s, b, c.out[0]->f32());
  }

  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    const float* x = xcopy_.f32();
    const float* s = two_bottoms_ ? c.in[1]->f32() : c.params[0]->f32();
    Tensor* ds = two_bottoms_ ? c.in_grad[1] : c.param_grad[0];
    if (ds) reduce_per_dim(g_, ds->f32(), [&](int64_t j) { return static_cast<double>(dy[j]) * x[j]; });
    if (bias_term_) {
      Tensor* db = c.param_grad[two_bottoms_ ? 0 : 1];
      if (db) reduce_per_dim(g_, db->f32(), [&](int64_t j) { return static_cast<double>(dy[j]); });
    }
    if (c.in_grad[0]) scale_forward(g_, dy, s, nullptr, c.in_grad[0]->f32());
  }

 private:
  bool bias_term_;
  bool two_bottoms_ = false;
  Broadcast g_;
  Tensor xcopy_;
};

class BiasKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    FactorGeometry f = bias_geometry(context(), in);
    g_ = f.g;
    two_bottoms_ = f.two_bottoms;
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
  bool two_bottoms_ = false;
  Broadcast g_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Scale", ScaleDef);
BKS_REGISTER_OP_DEF("Bias", BiasDef);
BKS_REGISTER_KERNEL("Scale", ::bks::DeviceKind::cpu, ScaleKernel, "loops", ::bks::kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Bias", ::bks::DeviceKind::cpu, BiasKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
