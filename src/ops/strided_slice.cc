// StridedSlice (strided_slice_param; ONNX Slice of a computed tensor): along each listed
// axis, the elements start, start + step, ... up to (not including) end; other axes whole.
// Negative start/end count from the axis' end and both are clamped to it, as ONNX reads
// them (torch exports "to the end" as INT64_MAX). Caffe's Slice, which cuts an axis into
// consecutive tops, is another op.
#include <algorithm>

#include "ops/op.h"

namespace bks {
namespace {

struct StridedSliceAttrs final : AttrsOf<StridedSliceAttrs> {
  std::vector<int64_t> axis, start, end, step;  // step empty: all 1
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("start", start);
    v.field("end", end);
    v.field("step", step);
  }
};
void strided_slice_from_caffe(const proto::LayerParameter& l, StridedSliceAttrs& a, const std::string&) {
  const proto::StridedSliceParameter& p = l.strided_slice_param();
  a.axis.assign(p.axis().begin(), p.axis().end());
  a.start.assign(p.start().begin(), p.start().end());
  a.end.assign(p.end().begin(), p.end().end());
  a.step.assign(p.step().begin(), p.step().end());
}
void strided_slice_to_caffe(const StridedSliceAttrs& a, proto::LayerParameter& l) {
  proto::StridedSliceParameter* p = l.mutable_strided_slice_param();
  p->Clear();
  for (int64_t v : a.axis) p->add_axis(static_cast<int32_t>(v));
  for (int64_t v : a.start) p->add_start(v);
  for (int64_t v : a.end) p->add_end(v);
  for (int64_t v : a.step) p->add_step(v);
}
BKS_REGISTER_ATTRS("StridedSlice", StridedSliceAttrs, strided_slice_from_caffe, strided_slice_to_caffe);

// Per axis of the bottom: the first element taken, the step and how many.
struct AxisSlice {
  int64_t first = 0, step = 1, count = 0;
};

std::vector<AxisSlice> slices(const OpContext& c, const Shape& s) {
  const StridedSliceAttrs& a = c.node.attrs.as<StridedSliceAttrs>();
  const auto nd = static_cast<int64_t>(s.size());
  std::vector<AxisSlice> r(s.size());
  for (size_t k = 0; k < s.size(); ++k) r[k] = {0, 1, s[k]};
  std::vector<bool> seen(s.size(), false);
  for (size_t j = 0; j < a.axis.size(); ++j) {
    int64_t ax = a.axis[j];
    if (ax < -nd || ax >= nd) c.fail("strided_slice_param.axis {} is outside a {}-d bottom", ax, nd);
    if (ax < 0) ax += nd;
    if (seen[ax]) c.fail("strided_slice_param.axis names axis {} twice", a.axis[j]);
    seen[ax] = true;
    const int64_t d = s[ax], step = a.step.empty() ? 1 : a.step[j];
    // Clamped as ONNX does: [0, d] going forward, [-1, d - 1] going back.
    auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + d : v, lo, hi); };
    const int64_t b = step > 0 ? clamp(a.start[j], 0, d) : clamp(a.start[j], 0, d - 1);
    const int64_t e = step > 0 ? clamp(a.end[j], 0, d) : clamp(a.end[j], -1, d - 1);
    const int64_t n = step > 0 ? (e - b + step - 1) / step : (b - e - step - 1) / -step;
    if (n <= 0)
      c.fail("strided_slice_param takes nothing of axis {} (size {}): start {}, end {}, step {}", a.axis[j], d,
             a.start[j], a.end[j], step);
    r[ax] = {b, step, n};
  }
  return r;
}

class StridedSliceDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const StridedSliceAttrs& a = c.node.attrs.as<StridedSliceAttrs>();
    if (a.start.size() != a.axis.size() || a.end.size() != a.axis.size() ||
        (!a.step.empty() && a.step.size() != a.axis.size()))
      c.fail(
          "strided_slice_param needs one start, end (and step, when any is given) per axis: {} axes, {} starts, "
          "{} ends, {} steps",
          a.axis.size(), a.start.size(), a.end.size(), a.step.size());
    for (int64_t s : a.step)
      if (s == 0) c.fail("strided_slice_param.step must not be 0");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0].clear();
    for (const AxisSlice& s : slices(c, in[0])) out[0].push_back(s.count);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;  // a fixed gather: the gradient is its scatter
    return f;
  }
};

class StridedSliceKernel final : public Kernel {
 public:
  explicit StridedSliceKernel(const OpInit& i) : Kernel(i) {}
  // The input offset of each output row (all axes but the last), and the last axis' slice.
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    const std::vector<AxisSlice> s = slices(context(), in[0]);
    const int nd = static_cast<int>(s.size());
    in_numel_ = shape_numel(in[0]);
    if (nd == 0) {
      rows_.assign(1, 0);
      inner_ = 1;
      return;
    }
    std::vector<int64_t> stride(nd, 1);
    for (int k = nd - 2; k >= 0; --k) stride[k] = stride[k + 1] * in[0][k + 1];
    inner_ = s.back().count;
    step_ = s.back().step;
    int64_t base = 0, n = 1;
    for (int k = 0; k < nd; ++k) base += s[k].first * stride[k];
    for (int k = 0; k < nd - 1; ++k) n *= s[k].count;
    rows_.assign(static_cast<size_t>(n), 0);
    std::vector<int64_t> pos(nd, 0);
    int64_t src = base;
    for (int64_t& r : rows_) {  // an odometer over the output's leading axes
      r = src;
      for (int k = nd - 2; k >= 0; --k) {
        src += s[k].step * stride[k];
        if (++pos[k] < s[k].count) break;
        src -= s[k].step * stride[k] * s[k].count;
        pos[k] = 0;
      }
    }
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    for (size_t r = 0; r < rows_.size(); ++r)
      for (int64_t i = 0; i < inner_; ++i) y[r * inner_ + i] = x[rows_[r] + i * step_];
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    std::fill(dx, dx + in_numel_, 0.f);
    for (size_t r = 0; r < rows_.size(); ++r)
      for (int64_t i = 0; i < inner_; ++i) dx[rows_[r] + i * step_] = dy[r * inner_ + i];
  }

 private:
  std::vector<int64_t> rows_;
  int64_t inner_ = 1, step_ = 1, in_numel_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("StridedSlice", StridedSliceDef);
BKS_REGISTER_KERNEL("StridedSlice", ::bks::DeviceKind::cpu, StridedSliceKernel, "loops", ::bks::kReferencePriority,
                    nullptr);

}  // namespace bks
