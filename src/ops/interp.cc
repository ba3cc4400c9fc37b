// Interp (the DeepLab v2 / PSPNet forks, hszhao/PSPNet): bilinear resize of each (n, c)
// plane with aligned corners, as the forks' caffe_cpu_interp2 computes it. The input is
// first cropped by -pad_beg rows and columns at the top left and -pad_end at the bottom
// right (the pads must not be positive). Output size, in the fork's order of precedence:
// shrink_factor alone: (in - 1) / shrink + 1; zoom_factor alone: in + (in - 1)(zoom - 1);
// height and width as given; both factors: shrink, then zoom. With a second bottom (the
// DeepLab-Context descendants of the layer) the size is that bottom's height and width and
// none of those four fields may be given.
//
// Sampling: output row i reads input row r = i * (in - 1) / (out - 1) (0 when out is 1),
// computed in float as the fork does, its floor h and the next row (h itself on the last
// row), weighted by 1 - (r - h) and r - h; columns alike. Same-size planes are copied.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

struct InterpAttrs final : AttrsOf<InterpAttrs> {
  // 0: not given (the fork tells given fields by presence; a given one must be positive).
  int64_t height = 0, width = 0, zoom_factor = 0, shrink_factor = 0;
  int64_t pad_beg = 0, pad_end = 0;
  void visit(AttrVisitor& v) override {
    v.field("height", height);
    v.field("width", width);
    v.field("zoom_factor", zoom_factor);
    v.field("shrink_factor", shrink_factor);
    v.field("pad_beg", pad_beg);
    v.field("pad_end", pad_end);
  }
};

void interp_from_caffe(const proto::LayerParameter& l, InterpAttrs& a, const std::string& where) {
  const proto::InterpParameter& p = l.interp_param();
  auto given = [&](bool has, int32_t v, const char* field) -> int64_t {
    if (has && v < 1) input_error("{}: interp_param.{} must be at least 1, got {}", where, field, v);
    return has ? v : 0;
  };
  a.height = given(p.has_height(), p.height(), "height");
  a.width = given(p.has_width(), p.width(), "width");
  a.zoom_factor = given(p.has_zoom_factor(), p.zoom_factor(), "zoom_factor");
  a.shrink_factor = given(p.has_shrink_factor(), p.shrink_factor(), "shrink_factor");
  a.pad_beg = p.pad_beg();
  a.pad_end = p.pad_end();
}

void interp_to_caffe(const InterpAttrs& a, proto::LayerParameter& l) {
  proto::InterpParameter* p = l.mutable_interp_param();
  p->Clear();
  if (a.height) p->set_height(static_cast<int32_t>(a.height));
  if (a.width) p->set_width(static_cast<int32_t>(a.width));
  if (a.zoom_factor) p->set_zoom_factor(static_cast<int32_t>(a.zoom_factor));
  if (a.shrink_factor) p->set_shrink_factor(static_cast<int32_t>(a.shrink_factor));
  if (a.pad_beg) p->set_pad_beg(static_cast<int32_t>(a.pad_beg));
  if (a.pad_end) p->set_pad_end(static_cast<int32_t>(a.pad_end));
}
BKS_REGISTER_ATTRS("Interp", InterpAttrs, interp_from_caffe, interp_to_caffe);

// The output's extent along an axis of the cropped input's extent `in`, by the factors.
int64_t scaled_extent(const OpContext& c, const InterpAttrs& a, int64_t in) {
  int64_t out = in;
  if (a.shrink_factor) out = (out - 1) / a.shrink_factor + 1;
  if (!a.zoom_factor) return out;
  if (out - 1 > (INT32_MAX - 1) / a.zoom_factor)
    c.fail("interp_param.zoom_factor {} makes the output too large", a.zoom_factor);
  return (out - 1) * a.zoom_factor + 1;  // in + (in - 1)(zoom - 1)
}

class InterpDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  int max_inputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    const InterpAttrs& a = c.node.attrs.as<InterpAttrs>();
    if (a.pad_beg > 0 || a.pad_end > 0)
      c.fail("interp_param: pad_beg {} and pad_end {} must not be positive (the forks only crop)", a.pad_beg,
             a.pad_end);
    bool any = a.height || a.width || a.zoom_factor || a.shrink_factor;
    if (c.node.inputs.size() > 1 && any)
      c.fail(
          "interp_param: with a second bottom giving the size, height, width, zoom_factor and shrink_factor must "
          "not be given (ambiguous)");
    if (c.node.inputs.size() == 1 && !a.zoom_factor && !a.shrink_factor && !(a.height && a.width))
      c.fail("interp_param needs height and width, zoom_factor or shrink_factor (or a second bottom giving the size)");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const InterpAttrs& a = c.node.attrs.as<InterpAttrs>();
    c.expect_ndim(in[0], 4, 4, "bottom 0");
    int64_t h = in[0][2] + a.pad_beg + a.pad_end, w = in[0][3] + a.pad_beg + a.pad_end;
    if (h <= 0 || w <= 0)
      c.fail("interp_param: pad_beg {} and pad_end {} crop all of the {}x{} input", a.pad_beg, a.pad_end, in[0][2],
             in[0][3]);
    int64_t oh, ow;
    if (in.size() > 1) {
      c.expect_ndim(in[1], 4, 4, "bottom 1");
      if (in[1][0] != in[0][0])
        c.fail("bottom 1 ({}) must have the batch of bottom 0 ({})", shape_str(in[1]), shape_str(in[0]));
      oh = in[1][2];
      ow = in[1][3];
    } else if (bool one_factor = (a.shrink_factor != 0) != (a.zoom_factor != 0); one_factor || !(a.height && a.width)) {
      // The fork's precedence: one factor alone wins over height/width, which win over both.
      oh = scaled_extent(c, a, h);
      ow = scaled_extent(c, a, w);
    } else {
      oh = a.height;
      ow = a.width;
    }
    if (oh <= 0 || ow <= 0) c.fail("the output would be {}x{}", oh, ow);
    out[0] = {in[0][0], in[0][1], oh, ow};
  }
  // Backward reads neither input; the size bottom takes no gradient.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.backward_reads_input = false;
    if (in.size() > 1) f.can_propagate_to = {true, false};
    return f;
  }
};

// One output row's (or column's) source: index `lo` of the cropped input, `step` (0 or 1)
// to the next, and the next one's weight.
struct Tap {
  int64_t lo = 0, step = 0;
  float w1 = 0.f, w0 = 1.f;
};

std::vector<Tap> taps(int64_t in, int64_t out) {
  std::vector<Tap> t(static_cast<size_t>(out));
  const float ratio = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  for (int64_t i = 0; i < out; ++i) {
    const float r = ratio * static_cast<float>(i);
    const auto lo = static_cast<int64_t>(r);
    const float w1 = r - static_cast<float>(lo);
    t[i] = {lo, lo < in - 1 ? 1 : 0, w1, 1.f - w1};
  }
  return t;
}

class InterpKernel final : public Kernel {
 public:
  explicit InterpKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<InterpAttrs>()) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    planes_ = in[0][0] * in[0][1];
    H_ = in[0][2];
    W_ = in[0][3];
    h_ = H_ + a_.pad_beg + a_.pad_end;
    w_ = W_ + a_.pad_beg + a_.pad_end;
    oh_ = out[0][2];
    ow_ = out[0][3];
    rows_ = taps(h_, oh_);
    cols_ = taps(w_, ow_);
    used_rows_.clear();
    for (const Tap& r : rows_)
      for (int64_t k : {r.lo, r.lo + r.step})
        if (used_rows_.empty() || used_rows_.back() < k) used_rows_.push_back(k);
  }

  // Columns first, on each input row some output row reads, then rows: the fork's
  // h0 (w0 a + w1 b) + h1 (w0 c + w1 d) grouped the same way, with the gathers done once
  // per input row instead of once per output row.
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    for_planes([&](int64_t p) {
      const float* src = x + p * H_ * W_ + origin();
      float* dst = y + p * oh_ * ow_;
      if (same_size()) {
        for (int64_t i = 0; i < oh_; ++i) std::memcpy(dst + i * ow_, src + i * W_, ow_ * sizeof(float));
        return;
      }
      thread_local std::vector<float> across;
      across.resize(static_cast<size_t>(h_ * ow_));
      for (int64_t r : used_rows_) {
        const float* in = src + r * W_;
        float* a = across.data() + r * ow_;
        for (int64_t j = 0; j < ow_; ++j) {
          const Tap& k = cols_[j];
          a[j] = k.w0 * in[k.lo] + k.w1 * in[k.lo + k.step];
        }
      }
      for (int64_t i = 0; i < oh_; ++i) {
        const Tap& r = rows_[i];
        const float* top = across.data() + r.lo * ow_;
        const float* bottom = top + r.step * ow_;
        float* out = dst + i * ow_;
        const float w0 = r.w0, w1 = r.w1;
#pragma omp simd
        for (int64_t j = 0; j < ow_; ++j) out[j] = w0 * top[j] + w1 * bottom[j];
      }
    });
  }

  // The adjoint: each output gradient goes back to its four taps with the same weights.
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for_planes([&](int64_t p) {
      float* plane = dx + p * H_ * W_;
      std::fill_n(plane, H_ * W_, 0.f);
      float* dst = plane + origin();
      const float* g = dy + p * oh_ * ow_;
      if (same_size()) {
        for (int64_t i = 0; i < oh_; ++i) std::memcpy(dst + i * W_, g + i * ow_, ow_ * sizeof(float));
        return;
      }
      for (int64_t i = 0; i < oh_; ++i) {
        const Tap& r = rows_[i];
        float* top = dst + r.lo * W_;
        float* bottom = top + r.step * W_;
        for (int64_t j = 0; j < ow_; ++j) {
          const Tap& k = cols_[j];
          const int64_t q = k.lo, q1 = k.lo + k.step;
          const float d = g[i * ow_ + j];
          top[q] += r.w0 * k.w0 * d;
          top[q1] += r.w0 * k.w1 * d;
          bottom[q] += r.w1 * k.w0 * d;
          bottom[q1] += r.w1 * k.w1 * d;
        }
      }
    });
  }

 private:
  // The crop's top-left element within a plane: -pad_beg rows and columns in.
  int64_t origin() const { return -a_.pad_beg * W_ - a_.pad_beg; }
  bool same_size() const { return h_ == oh_ && w_ == ow_; }
  template <class Body>
  void for_planes(Body&& body) const {
    const int64_t work = std::max<int64_t>(oh_ * ow_, 1);
    parallel_ranges(
        planes_,
        [&](int64_t lo, int64_t hi) {
          for (int64_t p = lo; p < hi; ++p) body(p);
        },
        std::max<int64_t>(kSerialBelow / work, 1));
  }

  InterpAttrs a_;
  int64_t planes_ = 0, H_ = 0, W_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  std::vector<Tap> rows_, cols_;
  std::vector<int64_t> used_rows_;  // the input rows some output row reads, ascending
};

}  // namespace

BKS_REGISTER_OP_DEF("Interp", InterpDef);
BKS_REGISTER_KERNEL("Interp", ::bks::DeviceKind::cpu, InterpKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
