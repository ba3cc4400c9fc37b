// Ops that only move data: Flatten and Reshape (views of their input), Split, Silence,
// Concat, Slice and Crop.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

// Copies `rows` blocks of `len` floats between strided buffers.
void copy_blocks(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, len * sizeof(float));
}

class ViewOp : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 1; }
  bool output_is_view() const override { return true; }
  bool backward_reads_input() const override { return false; }
  void forward(OpCall& c) override {
    if (c.out[0]->raw() != c.in[0]->raw()) c.out[0]->copy_from(*c.in[0]);
  }
  void backward(OpCall& c) override {
    if (c.in_grad[0] && c.in_grad[0]->raw() != c.out_grad[0]->raw()) c.in_grad[0]->copy_from(*c.out_grad[0]);
  }
  std::string kernel_name() const override { return "view"; }
};

class FlattenOp final : public ViewOp {
 public:
  explicit FlattenOp(const OpInit& i) : ViewOp(i), p_(i.node.param.flatten_param()) {}
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    int a = canonical_axis(p_.axis(), nd, "flatten_param.axis");
    int e = canonical_axis(p_.end_axis(), nd, "flatten_param.end_axis");
    if (e < a) fail("flatten_param.end_axis {} comes before axis {}", p_.end_axis(), p_.axis());
    Shape s(in[0].begin(), in[0].begin() + a);
    s.push_back(shape_count(in[0], a, e + 1));
    s.insert(s.end(), in[0].begin() + e + 1, in[0].end());
    out[0] = s;
  }

 private:
  proto::FlattenParameter p_;
};

class ReshapeOp final : public ViewOp {
 public:
  explicit ReshapeOp(const OpInit& i) : ViewOp(i), p_(i.node.param.reshape_param()) {
    int inferred = 0;
    for (auto d : p_.shape().dim()) {
      if (d == -1) ++inferred;
      else if (d < 0) fail("reshape_param.shape dims must be positive, 0 (copy) or -1 (infer), got {}", d);
    }
    if (inferred > 1) fail("reshape_param.shape may infer (-1) at most one dimension");
  }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    const Shape& s = in[0];
    int nd = static_cast<int>(s.size());
    int start = p_.axis() < 0 ? p_.axis() + nd + 1 : p_.axis();
    if (start < 0 || start > nd) fail("reshape_param.axis {} is out of range for {}", p_.axis(), shape_str(s));
    int end = p_.num_axes() == -1 ? nd : start + p_.num_axes();
    if (p_.num_axes() < -1 || end > nd) fail("reshape_param.num_axes {} is out of range for {}", p_.num_axes(), shape_str(s));
    Shape r(s.begin(), s.begin() + start);
    int infer_at = -1;
    for (int i = 0; i < p_.shape().dim_size(); ++i) {
      int64_t d = p_.shape().dim(i);
      if (d == 0) {
        if (start + i >= nd) fail("reshape_param.shape copies (0) axis {} that the input lacks", start + i);
        d = s[start + i];
      }
      if (d == -1) {
        infer_at = static_cast<int>(r.size());
        d = 1;
      }
      r.push_back(d);
    }
    r.insert(r.end(), s.begin() + end, s.end());
    int64_t have = shape_numel(s), got = shape_numel(r);
    if (infer_at >= 0) {
      if (got == 0 || have % got) fail("cannot reshape {} to {} with an inferred axis", shape_str(s), shape_str(r));
      r[infer_at] = have / got;
    } else if (have != got) {
      fail("cannot reshape {} ({} values) to {} ({} values)", shape_str(s), have, shape_str(r), got);
    }
    out[0] = r;
  }

 private:
  proto::ReshapeParameter p_;
};

class SplitOp final : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 1; }
  int max_outputs() const override { return -1; }
  bool backward_reads_input() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    for (auto& o : out) o = in[0];
  }
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

class SilenceOp final : public Op {
 public:
  using Op::Op;
  int min_inputs() const override { return 1; }
  int max_inputs() const override { return -1; }
  int min_outputs() const override { return 0; }
  bool has_backward() const override { return false; }
  void infer(const std::vector<Shape>&, std::vector<Shape>&) override {}
  void forward(OpCall&) override {}
};

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

// Copies each part into (join=true) or out of (join=false) the whole.
void move_parts(const AxisParts& g, float* whole, const std::vector<float*>& parts, bool join) {
  int64_t total = g.total(), off = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    int64_t len = g.sizes[k] * g.inner;
    // A part the runtime placed in its run of the whole is already there.
    if (parts[k] && parts[k] != whole + off * g.inner) {
      if (join) copy_blocks(parts[k], len, whole + off * g.inner, total * g.inner, g.outer, len);
      else copy_blocks(whole + off * g.inner, total * g.inner, parts[k], len, g.outer, len);
    }
    off += g.sizes[k];
  }
}

class ConcatOp final : public Op {
 public:
  explicit ConcatOp(const OpInit& i) : Op(i) {
    const auto& p = i.node.param.concat_param();
    if (p.has_axis() && p.has_concat_dim()) fail("give concat_param.axis or concat_dim, not both");
    axis_ = p.has_concat_dim() ? static_cast<int>(p.concat_dim()) : p.axis();
  }
  int min_inputs() const override { return 1; }
  int max_inputs() const override { return -1; }
  bool backward_reads_input() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    g_.axis = canonical_axis(axis_, nd, "concat_param.axis");
    g_.sizes.clear();
    for (size_t k = 0; k < in.size(); ++k) {
      if (static_cast<int>(in[k].size()) != nd) fail("bottom {} has {} axes, bottom 0 has {}", k, in[k].size(), nd);
      for (int d = 0; d < nd; ++d)
        if (d != g_.axis && in[k][d] != in[0][d])
          fail("bottom {} shape {} differs from bottom 0 shape {} outside axis {}", k, shape_str(in[k]),
               shape_str(in[0]), g_.axis);
      g_.sizes.push_back(in[k][g_.axis]);
    }
    g_.outer = shape_count(in[0], 0, g_.axis);
    g_.inner = shape_count(in[0], g_.axis + 1, nd);
    out[0] = in[0];
    out[0][g_.axis] = g_.total();
  }
  std::vector<int64_t> input_runs_in_output() const override {
    if (g_.outer != 1) return {};
    std::vector<int64_t> at;
    int64_t off = 0;
    for (int64_t size : g_.sizes) {
      at.push_back(off * g_.inner);
      off += size;
    }
    return at;
  }
  void forward(OpCall& c) override {
    std::vector<float*> parts;
    for (auto* t : c.in) parts.push_back(const_cast<float*>(t->f32()));
    move_parts(g_, c.out[0]->f32(), parts, true);
  }
  void backward(OpCall& c) override {
    std::vector<float*> parts;
    for (auto* t : c.in_grad) parts.push_back(t ? t->f32() : nullptr);
    move_parts(g_, const_cast<float*>(c.out_grad[0]->f32()), parts, false);
  }

 private:
  int axis_;
  AxisParts g_;
};

class SliceOp final : public Op {
 public:
  explicit SliceOp(const OpInit& i) : Op(i), p_(i.node.param.slice_param()) {
    if (p_.has_axis() && p_.has_slice_dim()) fail("give slice_param.axis or slice_dim, not both");
  }
  int min_inputs() const override { return 1; }
  int max_outputs() const override { return -1; }
  bool backward_reads_input() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    g_.axis = canonical_axis(p_.has_slice_dim() ? static_cast<int>(p_.slice_dim()) : p_.axis(), nd, "slice_param.axis");
    int64_t extent = in[0][g_.axis];
    g_.sizes.clear();
    int64_t n = static_cast<int64_t>(out.size());
    if (p_.slice_point_size() > 0) {
      if (p_.slice_point_size() != n - 1) fail("{} slice_point(s) for {} tops; need {}", p_.slice_point_size(), n, n - 1);
      int64_t prev = 0;
      for (auto sp : p_.slice_point()) {
        if (sp <= prev || sp >= extent) fail("slice_point {} must increase and stay inside (0, {})", sp, extent);
        g_.sizes.push_back(sp - prev);
        prev = sp;
      }
      g_.sizes.push_back(extent - prev);
    } else {
      if (extent % n) fail("axis {} of size {} does not split evenly into {} tops", g_.axis, extent, n);
      g_.sizes.assign(static_cast<size_t>(n), extent / n);
    }
    g_.outer = shape_count(in[0], 0, g_.axis);
    g_.inner = shape_count(in[0], g_.axis + 1, nd);
    for (size_t k = 0; k < out.size(); ++k) {
      out[k] = in[0];
      out[k][g_.axis] = g_.sizes[k];
    }
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
  proto::SliceParameter p_;
  AxisParts g_;
};

class CropOp final : public Op {
 public:
  explicit CropOp(const OpInit& i) : Op(i), p_(i.node.param.crop_param()) {}
  int min_inputs() const override { return 2; }
  bool can_propagate_to(int input) const override { return input == 0; }
  bool backward_reads_input() const override { return false; }
  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    if (static_cast<int>(in[1].size()) != nd) fail("both bottoms need the same number of axes");
    int axis = canonical_axis(p_.axis(), nd, "crop_param.axis");
    if (p_.offset_size() > 1 && p_.offset_size() != nd - axis)
      fail("crop_param.offset needs 0, 1 or {} values", nd - axis);
    offsets_.assign(nd, 0);
    out[0] = in[0];
    for (int d = axis; d < nd; ++d) {
      int64_t off = p_.offset_size() == 0 ? 0 : p_.offset(p_.offset_size() == 1 ? 0 : d - axis);
      if (in[1][d] + off > in[0][d])
        fail("crop of axis {} to {} at offset {} exceeds its size {}", d, in[1][d], off, in[0][d]);
      offsets_[d] = off;
      out[0][d] = in[1][d];
    }
    in_shape_ = in[0];
    out_shape_ = out[0];
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
      if (to_big) std::memcpy(const_cast<float*>(big) + src, small + r * len, len * sizeof(float));
      else std::memcpy(small + r * len, big + src, len * sizeof(float));
    }
  }
  proto::CropParameter p_;
  std::vector<int64_t> offsets_;
  Shape in_shape_, out_shape_;
};

}  // namespace

BKS_REGISTER_OP("Flatten", FlattenOp);
BKS_REGISTER_OP("Reshape", ReshapeOp);
BKS_REGISTER_OP("Split", SplitOp);
BKS_REGISTER_OP("Silence", SilenceOp);
BKS_REGISTER_OP("Concat", ConcatOp);
BKS_REGISTER_OP("Slice", SliceOp);
BKS_REGISTER_OP("Crop", CropOp);

}  // namespace bks
