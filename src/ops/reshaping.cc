// Ops that only move data: Flatten and Reshape (views of their input), Split, Silence,
// Concat, Slice and Crop.
#include <cstring>
#include <vector>

#include "backend/dnnl_util.h"
#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

// ---- Attributes ----

struct FlattenAttrs final : AttrsOf<FlattenAttrs> {
  int64_t axis = 1;
  int64_t end_axis = -1;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("end_axis", end_axis);
  }
};
void flatten_from_caffe(const proto::LayerParameter& l, FlattenAttrs& a, const std::string&) {
  a.axis = l.flatten_param().axis();
  a.end_axis = l.flatten_param().end_axis();
}
void flatten_to_caffe(const FlattenAttrs& a, proto::LayerParameter& l) {
  l.mutable_flatten_param()->set_axis(static_cast<int32_t>(a.axis));
  l.mutable_flatten_param()->set_end_axis(static_cast<int32_t>(a.end_axis));
}
BKS_REGISTER_ATTRS("Flatten", FlattenAttrs, flatten_from_caffe, flatten_to_caffe);

// Axes [axis, axis + num_axes) of the input (num_axes -1: to the end) become `shape`, whose
// dims are sizes, 0 (copy the input's) or -1 (inferred).
struct ReshapeAttrs final : AttrsOf<ReshapeAttrs> {
  std::vector<int64_t> shape;
  int64_t axis = 0;
  int64_t num_axes = -1;
  void visit(AttrVisitor& v) override {
    v.field("shape", shape);
    v.field("axis", axis);
    v.field("num_axes", num_axes);
  }
};
void reshape_from_caffe(const proto::LayerParameter& l, ReshapeAttrs& a, const std::string&) {
  const proto::ReshapeParameter& p = l.reshape_param();
  a.shape.assign(p.shape().dim().begin(), p.shape().dim().end());
  a.axis = p.axis();
  a.num_axes = p.num_axes();
}
void reshape_to_caffe(const ReshapeAttrs& a, proto::LayerParameter& l) {
  proto::ReshapeParameter* p = l.mutable_reshape_param();
  p->mutable_shape()->clear_dim();
  for (int64_t d : a.shape) p->mutable_shape()->add_dim(d);
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_num_axes(static_cast<int32_t>(a.num_axes));
}
BKS_REGISTER_ATTRS("Reshape", ReshapeAttrs, reshape_from_caffe, reshape_to_caffe);

// The axis the inputs are joined along.
struct ConcatAttrs final : AttrsOf<ConcatAttrs> {
  int64_t axis = 1;
  void visit(AttrVisitor& v) override { v.field("axis", axis); }
};
// Caffe's older concat_dim names the same axis.
void concat_from_caffe(const proto::LayerParameter& l, ConcatAttrs& a, const std::string& where) {
  const proto::ConcatParameter& p = l.concat_param();
  if (p.has_axis() && p.has_concat_dim()) input_error("{}: give concat_param.axis or concat_dim, not both", where);
  a.axis = p.has_concat_dim() ? static_cast<int64_t>(p.concat_dim()) : p.axis();
}
void concat_to_caffe(const ConcatAttrs& a, proto::LayerParameter& l) {
  l.mutable_concat_param()->clear_concat_dim();
  l.mutable_concat_param()->set_axis(static_cast<int32_t>(a.axis));
}
BKS_REGISTER_ATTRS("Concat", ConcatAttrs, concat_from_caffe, concat_to_caffe);

// slice_point: where each top after the first begins on the axis (none: equal parts).
struct SliceAttrs final : AttrsOf<SliceAttrs> {
  int64_t axis = 1;
  std::vector<int64_t> slice_point;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("slice_point", slice_point);
  }
};
// Caffe's older slice_dim names the same axis.
void slice_from_caffe(const proto::LayerParameter& l, SliceAttrs& a, const std::string& where) {
  const proto::SliceParameter& p = l.slice_param();
  if (p.has_axis() && p.has_slice_dim()) input_error("{}: give slice_param.axis or slice_dim, not both", where);
  a.axis = p.has_slice_dim() ? static_cast<int64_t>(p.slice_dim()) : p.axis();
  a.slice_point.assign(p.slice_point().begin(), p.slice_point().end());
}
void slice_to_caffe(const SliceAttrs& a, proto::LayerParameter& l) {
  proto::SliceParameter* p = l.mutable_slice_param();
  p->clear_slice_dim();
  p->set_axis(static_cast<int32_t>(a.axis));
  p->clear_slice_point();
  for (int64_t s : a.slice_point) p->add_slice_point(static_cast<uint32_t>(s));
}
BKS_REGISTER_ATTRS("Slice", SliceAttrs, slice_from_caffe, slice_to_caffe);

// The first bottom is cropped to the second's shape on axes >= axis, starting at offset
// (none: 0; one: the same on every such axis; or one per axis).
struct CropAttrs final : AttrsOf<CropAttrs> {
  int64_t axis = 2;
  std::vector<int64_t> offset;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("offset", offset);
  }
};
void crop_from_caffe(const proto::LayerParameter& l, CropAttrs& a, const std::string&) {
  a.axis = l.crop_param().axis();
  a.offset.assign(l.crop_param().offset().begin(), l.crop_param().offset().end());
}
void crop_to_caffe(const CropAttrs& a, proto::LayerParameter& l) {
  proto::CropParameter* p = l.mutable_crop_param();
  p->set_axis(static_cast<int32_t>(a.axis));
  p->clear_offset();
  for (int64_t o : a.offset) p->add_offset(static_cast<uint32_t>(o));
}
BKS_REGISTER_ATTRS("Crop", CropAttrs, crop_from_caffe, crop_to_caffe);

// ---- Shared geometry ----

// Concat and Slice share the geometry: inputs (or outputs) laid side by side on one axis.
struct AxisParts {
  int axis = 1;
  int64_t outer = 1, inner = 1;
  std::vector<int64_t> sizes;  // extent of each part along the axis
  int64_t total() const {
    int64_t t = 0;
    for (auto s : sizes) t += s;
    return t;
  }
};

// Copies each part into (join=true) or out of (join=false) the whole, row by row: every
// row of the whole written (or read) at once. Many short rows (channels-last: one per pixel)
// are shared by the threads: on one thread, GoogLeNet's inception3b concat took 156 us
// against ONNX Runtime's 77.
void move_parts(const AxisParts& g, float* whole, const std::vector<float*>& parts, bool join) {
  const int64_t total = g.total();
  std::vector<int64_t> offset(parts.size());
  int64_t off = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    offset[k] = off;
    off += g.sizes[k];
  }
  // A part the runtime placed in its run of the whole is already there.
  auto placed = [&](size_t k) { return !parts[k] || parts[k] == whole + offset[k] * g.inner; };
#pragma omp parallel for schedule(static) if (g.outer >= 16 && g.outer * total * g.inner >= kSerialBelow)
  for (int64_t r = 0; r < g.outer; ++r)
    for (size_t k = 0; k < parts.size(); ++k) {
      if (placed(k)) continue;
      const int64_t len = g.sizes[k] * g.inner;
      float* w = whole + (r * total + offset[k]) * g.inner;
      float* p = parts[k] + r * len;
      if (join)
        std::memcpy(w, p, static_cast<size_t>(len) * sizeof(float));
      else
        std::memcpy(p, w, static_cast<size_t>(len) * sizeof(float));
    }
}

// The inputs of a Concat as parts of its output.
AxisParts concat_parts(const OpContext& c, const std::vector<Shape>& in) {
  int nd = static_cast<int>(in[0].size());
  AxisParts g;
  g.axis = canonical_axis(c.node.attrs.as<ConcatAttrs>().axis, nd, "concat_param.axis");
  for (size_t k = 0; k < in.size(); ++k) {
    if (static_cast<int>(in[k].size()) != nd) c.fail("bottom {} has {} axes, bottom 0 has {}", k, in[k].size(), nd);
    for (int d = 0; d < nd; ++d)
      if (d != g.axis && in[k][d] != in[0][d])
        c.fail("bottom {} shape {} differs from bottom 0 shape {} outside axis {}", k, shape_str(in[k]),
               shape_str(in[0]), g.axis);
    g.sizes.push_back(in[k][g.axis]);
  }
  g.outer = shape_count(in[0], 0, g.axis);
  g.inner = shape_count(in[0], g.axis + 1, nd);
  return g;
}

// The outputs of a Slice (`tops` of them) as parts of its input `s`.
AxisParts slice_parts(const OpContext& c, const Shape& s, size_t tops) {
  const SliceAttrs& a = c.node.attrs.as<SliceAttrs>();
  int nd = static_cast<int>(s.size());
  AxisParts g;
  g.axis = canonical_axis(a.axis, nd, "slice_param.axis");
  int64_t extent = s[g.axis];
  int64_t n = static_cast<int64_t>(tops);
  int64_t points = static_cast<int64_t>(a.slice_point.size());
  if (points > 0) {
    if (points != n - 1) c.fail("{} slice_point(s) for {} tops; need {}", points, n, n - 1);
    int64_t prev = 0;
    for (int64_t sp : a.slice_point) {
      if (sp <= prev || sp >= extent) c.fail("slice_point {} must increase and stay inside (0, {})", sp, extent);
      g.sizes.push_back(sp - prev);
      prev = sp;
    }
    g.sizes.push_back(extent - prev);
  } else {
    if (extent % n) c.fail("axis {} of size {} does not split evenly into {} tops", g.axis, extent, n);
    g.sizes.assign(static_cast<size_t>(n), extent / n);
  }
  g.outer = shape_count(s, 0, g.axis);
  g.inner = shape_count(s, g.axis + 1, nd);
  return g;
}

// Where a Crop reads: the offset on every axis of the first bottom, and its output shape.
struct CropGeometry {
  std::vector<int64_t> offsets;
  Shape out;
};

CropGeometry crop_geometry(const OpContext& c, const std::vector<Shape>& in) {
  const CropAttrs& a = c.node.attrs.as<CropAttrs>();
  int nd = static_cast<int>(in[0].size());
  if (static_cast<int>(in[1].size()) != nd) c.fail("both bottoms need the same number of axes");
  int axis = canonical_axis(a.axis, nd, "crop_param.axis");
  int64_t offsets = static_cast<int64_t>(a.offset.size());
  if (offsets > 1 && offsets != nd - axis) c.fail("crop_param.offset needs 0, 1 or {} values", nd - axis);
  CropGeometry g;
  g.offsets.assign(nd, 0);
  g.out = in[0];
  for (int d = axis; d < nd; ++d) {
    int64_t off = offsets == 0 ? 0 : a.offset[offsets == 1 ? 0 : d - axis];
    if (off < 0) c.fail("crop_param.offset {} is negative", off);
    if (in[1][d] + off > in[0][d])
      c.fail("crop of axis {} to {} at offset {} exceeds its size {}", d, in[1][d], off, in[0][d]);
    g.offsets[d] = off;
    g.out[d] = in[1][d];
  }
  return g;
}

// ---- Definitions ----

// Flatten and Reshape: the output is a view of the input.
class ViewDef : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.output_is_view = true;
    f.backward_reads_input = false;
    return f;
  }
};

class FlattenDef final : public ViewDef {
 public:
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const FlattenAttrs& p = c.node.attrs.as<FlattenAttrs>();
    int nd = static_cast<int>(in[0].size());
    int a = canonical_axis(p.axis, nd, "flatten_param.axis");
    int e = canonical_axis(p.end_axis, nd, "flatten_param.end_axis");
    if (e < a) c.fail("flatten_param.end_axis {} comes before axis {}", p.end_axis, p.axis);
    Shape s(in[0].begin(), in[0].begin() + a);
    s.push_back(shape_count(in[0], a, e + 1));
    s.insert(s.end(), in[0].begin() + e + 1, in[0].end());
    out[0] = s;
  }
  // From axis 1 to the last: each channel becomes a run of the output's axis 1.
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const override {
    const FlattenAttrs& p = n.attrs.as<FlattenAttrs>();
    const auto nd = static_cast<int64_t>(in.empty() ? 0 : in[0].size());
    return nd >= 2 && (p.axis == 1 || p.axis == 1 - nd) && (p.end_axis == -1 || p.end_axis == nd - 1)
               ? ChannelFlow::flatten
               : ChannelFlow::blocks;
  }
};

class ReshapeDef final : public ViewDef {
 public:
  void check(const OpContext& c) const override {
    int inferred = 0;
    for (int64_t d : c.node.attrs.as<ReshapeAttrs>().shape) {
      if (d == -1)
        ++inferred;
      else if (d < 0)
        c.fail("reshape_param.shape dims must be positive, 0 (copy) or -1 (infer), got {}", d);
    }
    if (inferred > 1) c.fail("reshape_param.shape may infer (-1) at most one dimension");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const ReshapeAttrs& p = c.node.attrs.as<ReshapeAttrs>();
    const Shape& s = in[0];
    int64_t nd = static_cast<int64_t>(s.size());
    int64_t start = p.axis < 0 ? p.axis + nd + 1 : p.axis;
    if (start < 0 || start > nd) c.fail("reshape_param.axis {} is out of range for {}", p.axis, shape_str(s));
    int64_t end = p.num_axes == -1 ? nd : start + p.num_axes;
    if (p.num_axes < -1 || end > nd)
      c.fail("reshape_param.num_axes {} is out of range for {}", p.num_axes, shape_str(s));
    Shape r(s.begin(), s.begin() + start);
    int infer_at = -1;
    for (size_t i = 0; i < p.shape.size(); ++i) {
      int64_t d = p.shape[i];
      int64_t at = start + static_cast<int64_t>(i);
      if (d == 0) {
        if (at >= nd) c.fail("reshape_param.shape copies (0) axis {} that the input lacks", at);
        d = s[at];
      }
      if (d == -1) {
        infer_at = static_cast<int>(r.size());
        d = 1;
      }
      r.push_back(d);
    }
    r.insert(r.end(), s.begin() + end, s.end());
    int64_t have = shape_numel(s), got = 0;
    if (!checked_product(r, kMaxTensorBytes, got))
      c.fail("reshape_param.shape gives {}, too large a shape", shape_str(r));
    if (infer_at >= 0) {
      if (got == 0 || have % got) c.fail("cannot reshape {} to {} with an inferred axis", shape_str(s), shape_str(r));
      r[infer_at] = have / got;
    } else if (have != got) {
      c.fail("cannot reshape {} ({} values) to {} ({} values)", shape_str(s), have, shape_str(r), got);
    }
    out[0] = r;
  }
};

class SplitDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_outputs(const OpContext&) const override { return -1; }
  void infer(const OpContext&, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    for (auto& o : out) o = in[0];
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
};

class SilenceDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_inputs(const OpContext&) const override { return -1; }
  int min_outputs(const OpContext&) const override { return 0; }
  void infer(const OpContext&, const std::vector<Shape>&, std::vector<Shape>&) const override {}
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::training_only}); }
};

class ConcatDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_inputs(const OpContext&) const override { return -1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    AxisParts g = concat_parts(c, in);
    out[0] = in[0];
    out[0][g.axis] = g.total();
  }
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const override {
    const int64_t axis = n.attrs.as<ConcatAttrs>().axis;
    const auto nd = static_cast<int64_t>(in.empty() ? 0 : in[0].size());
    return nd >= 2 && (axis == 1 || axis == 1 - nd) ? ChannelFlow::concat : ChannelFlow::blocks;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::passes_bf16}); }
  // With one outer block, each input is a contiguous run of the output, which the runtime
  // may place it in.
  OpFacts facts(const OpContext& c, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.backward_reads_input = false;
    f.plain_output_takes_plain_inputs = true;
    AxisParts g = concat_parts(c, in);
    if (g.outer != 1) return f;
    int64_t off = 0;
    for (int64_t size : g.sizes) {
      f.input_runs_in_output.push_back(off * g.inner);
      off += size;
    }
    return f;
  }
};

class SliceDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_outputs(const OpContext&) const override { return -1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    AxisParts g = slice_parts(c, in[0], out.size());
    for (size_t k = 0; k < out.size(); ++k) {
      out[k] = in[0];
      out[k][g.axis] = g.sizes[k];
    }
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class CropDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = crop_geometry(c, in).out;
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.backward_reads_input = false;
    f.can_propagate_to.assign(in.size(), false);
    f.can_propagate_to[0] = true;  // the second bottom only gives the shape
    return f;
  }
};

// ---- Kernels ----

class ViewKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall& c) override {
    if (c.out[0]->raw() != c.in[0]->raw()) c.out[0]->copy_from(*c.in[0]);
  }
  void backward(OpCall& c) override {
    if (c.in_grad[0] && c.in_grad[0]->raw() != c.out_grad[0]->raw()) c.in_grad[0]->copy_from(*c.out_grad[0]);
  }
  std::string kernel_name() const override { return "view"; }
};

class SplitKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall& c) override {
    for (auto* o : c.out) o->copy_from(*c.in[0]);
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    float* dx = c.in_grad[0]->f32();
    int64_t n = c.in_grad[0]->numel();
    std::fill_n(dx, n, 0.f);
    for (auto* g : c.out_grad) {
      if (!g) continue;
      const float* p = g->f32();
      for (int64_t i = 0; i < n; ++i) dx[i] += p[i];
    }
  }
};

class SilenceKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall&) override {}
};

// Concat along the channels of 4-d tensors in a layout other than NCHW (inference), so the
// convolutions around an Inception block keep theirs:
//  - oneDNN's channel-blocked nChw8c / nChw16c, when every input is a whole number of
//    blocks: then each input is, per image, one contiguous run of the output as in NCHW,
//    and the runtime may place it there (the same copies, or none);
//  - channels-last (NHWC): each input is a run of C_i floats per pixel.
// The output takes that layout when every input arrives in it; otherwise it is plain, and
// its inputs are made plain too, written straight into it at batch 1. (An input whose
// layout changes after the choice, for another reader, is converted first.)
class ConcatKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    g_ = concat_parts(context(), in);
    in_shapes_ = in;
    out_shape_ = out[0];
  }
  LayoutRule layout_rule() const override {
    return phase_ == proto::TEST ? LayoutRule::any_in_any_out : LayoutRule::plain_only;
  }
  memory::desc preferred_output_layout(int, const std::vector<memory::desc>& in) override {
    if (g_.axis != 1 || in.empty() || out_shape_.size() != 4) return {};
    auto all_in = [&](auto&& is) {
      for (size_t i = 0; i < in.size(); ++i)
        if (!is(in[i], in_shapes_[i])) return false;
      return true;
    };
    auto bf16_nhwc = [](const memory::desc& m, const Shape& s) { return m == layout_md(Layout::nhwc, s, true); };
    if (all_in(bf16_nhwc) && even_channels()) return layout_md(Layout::nhwc, out_shape_, true);
    for (Layout l : {Layout::nhwc, Layout::block8, Layout::block16})
      if (fits(l) && all_in([&](const memory::desc& m, const Shape& s) { return m == layout_md(l, s); }))
        return layout_md(l, out_shape_);
    // Channels-last inputs of both types: f32 channels-last, the bf16 ones converted.
    if (all_in(
            [&](const memory::desc& m, const Shape& s) { return m == layout_md(Layout::nhwc, s) || bf16_nhwc(m, s); }))
      return layout_md(Layout::nhwc, out_shape_);
    return {};
  }
  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    const memory::desc y = out_md(0, out[0]);
    layout_ = Layout::plain;
    for (Layout l : {Layout::nhwc, Layout::block8, Layout::block16})
      if (out[0].size() == 4 && y == layout_md(l, out[0])) layout_ = l;
    halves_ = out[0].size() == 4 && y == layout_md(Layout::nhwc, out[0], true);
    if (halves_) layout_ = Layout::nhwc;
    convert_.assign(in.size(), DnnlOperand());
    for (size_t i = 0; i < in.size(); ++i)
      convert_[i].init(static_cast<CpuBackend&>(backend_).engine(), in_md(static_cast<int>(i), in[i]),
                       layout_md(layout_, in[i], halves_));
    parts_ = g_;
    if (layout_ == Layout::nhwc) {
      // Channels innermost: runs of C_i per pixel. bf16 runs (even C_i) move as C_i / 2
      // floats.
      parts_.outer = out[0][0] * out[0][2] * out[0][3];
      parts_.inner = 1;
      if (halves_)
        for (int64_t& c : parts_.sizes) c /= 2;
    }
    static const char* const names[] = {"reference", "bakusoku channels-last copies", "bakusoku nChw8c copies",
                                        "bakusoku nChw16c copies"};
    impl_ = names[static_cast<int>(layout_)];
    if (halves_) impl_ += " (bf16)";
  }
  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    std::vector<float*> parts;
    for (size_t i = 0; i < c.in.size(); ++i) {
      float* p = const_cast<float*>(c.in[i]->f32());
      if (i < convert_.size() && convert_[i].reorders()) p = static_cast<float*>(convert_[i].read(s, p).get_data_handle());
      parts.push_back(p);
    }
    s.wait();
    move_parts(parts_, c.out[0]->f32(), parts, true);
  }
  void backward(OpCall& c) override {
    std::vector<float*> parts;
    for (auto* t : c.in_grad) parts.push_back(t ? t->f32() : nullptr);
    move_parts(g_, const_cast<float*>(c.out_grad[0]->f32()), parts, false);
  }
  std::string kernel_name() const override { return impl_; }

 private:
  enum class Layout { plain, nhwc, block8, block16 };
  static memory::desc layout_md(Layout l, const Shape& s, bool bf16 = false) {
    switch (l) {
      case Layout::nhwc:
        return memory::desc(to_dims(s), bf16 ? memory::data_type::bf16 : memory::data_type::f32,
                            memory::format_tag::nhwc);
      case Layout::block8: return channel_blocked_md(s, 8);
      case Layout::block16: return channel_blocked_md(s, 16);
      default: return plain_md(s);
    }
  }
  // Blocked layouts need whole blocks in every input.
  bool fits(Layout l) const {
    const int64_t block = l == Layout::block8 ? 8 : l == Layout::block16 ? 16 : 1;
    for (const Shape& s : in_shapes_)
      if (s[1] % block != 0) return false;
    return true;
  }
  bool even_channels() const {
    for (const Shape& s : in_shapes_)
      if (s[1] % 2 != 0) return false;
    return true;
  }

  AxisParts g_, parts_;
  std::vector<Shape> in_shapes_;
  Shape out_shape_;
  Layout layout_ = Layout::plain;
  bool halves_ = false;  // bf16 channels-last: two-byte values moved in pairs
  std::vector<DnnlOperand> convert_;
  std::string impl_ = "reference";
};

class SliceKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    g_ = slice_parts(context(), in[0], out.size());
  }
  void forward(OpCall& c) override {
    std::vector<float*> parts;
    for (auto* t : c.out) parts.push_back(t->f32());
    move_parts(g_, const_cast<float*>(c.in[0]->f32()), parts, false);
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    c.in_grad[0]->zero();
    std::vector<float*> parts;
    for (auto* t : c.out_grad) parts.push_back(t ? const_cast<float*>(t->f32()) : nullptr);
    move_parts(g_, c.in_grad[0]->f32(), parts, true);
  }

 private:
  AxisParts g_;
};

class CropKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    CropGeometry g = crop_geometry(context(), in);
    offsets_ = std::move(g.offsets);
    in_shape_ = in[0];
    out_shape_ = std::move(g.out);
  }
  void forward(OpCall& c) override { walk(c.in[0]->f32(), c.out[0]->f32(), false); }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    c.in_grad[0]->zero();
    walk(c.in_grad[0]->f32(), const_cast<float*>(c.out_grad[0]->f32()), true);
  }

 private:
  // Visits each innermost row of the cropped region; copies big->small or back.
  void walk(const float* big, float* small, bool to_big) {
    int nd = static_cast<int>(in_shape_.size());
    int64_t rows = shape_count(out_shape_, 0, nd - 1), len = out_shape_[nd - 1];
    std::vector<int64_t> idx(nd, 0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, src = 0;
      for (int d = nd - 2; d >= 0; --d) {
        idx[d] = rem % out_shape_[d];
        rem /= out_shape_[d];
      }
      int64_t stride = in_shape_[nd - 1];
      src = offsets_[nd - 1];
      for (int d = nd - 2; d >= 0; --d) {
        src += (idx[d] + offsets_[d]) * stride;
        stride *= in_shape_[d];
      }
      if (to_big)
        std::memcpy(const_cast<float*>(big) + src, small + r * len, len * sizeof(float));
      else
        std::memcpy(small + r * len, big + src, len * sizeof(float));
    }
  }
  std::vector<int64_t> offsets_;
  Shape in_shape_, out_shape_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Flatten", FlattenDef);
BKS_REGISTER_OP_DEF("Reshape", ReshapeDef);
BKS_REGISTER_OP_DEF("Split", SplitDef);
BKS_REGISTER_OP_DEF("Silence", SilenceDef);
BKS_REGISTER_OP_DEF("Concat", ConcatDef);
BKS_REGISTER_OP_DEF("Slice", SliceDef);
BKS_REGISTER_OP_DEF("Crop", CropDef);

BKS_REGISTER_KERNEL("Flatten", ::bks::DeviceKind::cpu, ViewKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Reshape", ::bks::DeviceKind::cpu, ViewKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Split", ::bks::DeviceKind::cpu, SplitKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Silence", ::bks::DeviceKind::cpu, SilenceKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Concat", ::bks::DeviceKind::cpu, ConcatKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Slice", ::bks::DeviceKind::cpu, SliceKernel, "loops", kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("Crop", ::bks::DeviceKind::cpu, CropKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
