// Upsample (the SegNet/ENet forks' max unpooling): bottoms (x, mask), where mask is a MAX
// Pooling's second top, the index of each winner within its (n, c) plane. Each x is written
// at its index in a zeroed output plane; backward gathers the gradient from the same index.
// The output's extent is upsample_h/upsample_w, or the input's times scale_h/scale_w less
// one where pad_out_h/pad_out_w (an odd input extent pooled with scale 2).
#include <algorithm>

#include "ops/op.h"

namespace bks {
namespace {

struct UpsampleAttrs final : AttrsOf<UpsampleAttrs> {
  int64_t scale_h = 2, scale_w = 2;
  bool pad_out_h = false, pad_out_w = false;
  int64_t upsample_h = 0, upsample_w = 0;  // the output's extent; 0: from the scale
  void visit(AttrVisitor& v) override {
    v.field("scale_h", scale_h);
    v.field("scale_w", scale_w);
    v.field("pad_out_h", pad_out_h);
    v.field("pad_out_w", pad_out_w);
    v.field("upsample_h", upsample_h);
    v.field("upsample_w", upsample_w);
  }
};

// The forks accept upsample_h with upsample_w, or scale_h with scale_w (without scale), or
// scale alone.
void upsample_from_caffe(const proto::LayerParameter& l, UpsampleAttrs& a, const std::string& where) {
  const proto::UpsampleParameter& p = l.upsample_param();
  if (p.has_upsample_h() != p.has_upsample_w())
    input_error("{}: upsample_param: give upsample_h and upsample_w together", where);
  if (p.has_upsample_h()) {
    a.upsample_h = p.upsample_h();
    a.upsample_w = p.upsample_w();
    return;
  }
  if (p.has_scale_h() != p.has_scale_w())
    input_error("{}: upsample_param: give scale_h and scale_w together", where);
  if (p.has_scale_h() && p.has_scale())
    input_error("{}: upsample_param: give scale or scale_h/scale_w, not both", where);
  a.scale_h = p.has_scale_h() ? p.scale_h() : p.scale();
  a.scale_w = p.has_scale_w() ? p.scale_w() : p.scale();
  a.pad_out_h = p.pad_out_h();
  a.pad_out_w = p.pad_out_w();
}

void upsample_to_caffe(const UpsampleAttrs& a, proto::LayerParameter& l) {
  proto::UpsampleParameter* p = l.mutable_upsample_param();
  p->Clear();
  if (a.upsample_h > 0) {
    p->set_upsample_h(static_cast<uint32_t>(a.upsample_h));
    p->set_upsample_w(static_cast<uint32_t>(a.upsample_w));
    return;
  }
  if (a.scale_h == a.scale_w) {
    p->set_scale(static_cast<uint32_t>(a.scale_h));
  } else {
    p->set_scale_h(static_cast<uint32_t>(a.scale_h));
    p->set_scale_w(static_cast<uint32_t>(a.scale_w));
  }
  if (a.pad_out_h) p->set_pad_out_h(true);
  if (a.pad_out_w) p->set_pad_out_w(true);
}
BKS_REGISTER_ATTRS("Upsample", UpsampleAttrs, upsample_from_caffe, upsample_to_caffe);

// The output plane's extent for an input plane of h x w.
void upsample_extent(const OpContext& c, int64_t h, int64_t w, int64_t& oh, int64_t& ow) {
  const UpsampleAttrs& a = c.node.attrs.as<UpsampleAttrs>();
  if (a.upsample_h > 0 || a.upsample_w > 0) {
    if (a.upsample_h <= 1 || a.upsample_w <= 1) c.fail("upsample_param: upsample_h and upsample_w must exceed 1");
    oh = a.upsample_h;
    ow = a.upsample_w;
    return;
  }
  if (a.scale_h <= 1 || a.scale_w <= 1) c.fail("upsample_param: scale must exceed 1");
  if ((a.pad_out_h && a.scale_h != 2) || (a.pad_out_w && a.scale_w != 2))
    c.fail("upsample_param: pad_out_h/pad_out_w need a scale of 2");
  if (h > INT32_MAX / a.scale_h || w > INT32_MAX / a.scale_w) c.fail("upsample_param: the output is too large");
  oh = h * a.scale_h - (a.pad_out_h ? 1 : 0);
  ow = w * a.scale_w - (a.pad_out_w ? 1 : 0);
}

class UpsampleDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    int64_t oh, ow;
    upsample_extent(c, 2, 2, oh, ow);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.expect_ndim(in[0], 4, 4, "bottom 0");
    if (in[1] != in[0]) c.fail("the mask (bottom 1) must have the shape of bottom 0");
    int64_t oh, ow;
    upsample_extent(c, in[0][2], in[0][3], oh, ow);
    out[0] = {in[0][0], in[0][1], oh, ow};
  }
  // The mask takes no gradient; backward reads only it.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.can_propagate_to = {true, false};
    f.reads_input_in_backward = {false, true};
    return f;
  }
};

class UpsampleKernel final : public Kernel {
 public:
  explicit UpsampleKernel(const OpInit& i) : Kernel(i) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    planes_ = in[0][0] * in[0][1];
    in_plane_ = in[0][2] * in[0][3];
    out_plane_ = out[0][2] * out[0][3];
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* mask = c.in[1]->f32();
    float* y = c.out[0]->f32();
    std::fill_n(y, planes_ * out_plane_, 0.f);
    for (int64_t p = 0; p < planes_; ++p)
      for (int64_t i = 0; i < in_plane_; ++i) y[p * out_plane_ + index(mask[p * in_plane_ + i])] = x[p * in_plane_ + i];
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* mask = c.in[1]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    for (int64_t p = 0; p < planes_; ++p)
      for (int64_t i = 0; i < in_plane_; ++i)
        dx[p * in_plane_ + i] = dy[p * out_plane_ + index(mask[p * in_plane_ + i])];
  }

 private:
  // A mask entry as an index into the output plane; the pooling that made the mask must
  // have pooled an input of the output's extent.
  int64_t index(float m) const {
    if (!(m >= 0.f && m < static_cast<float>(out_plane_)))
      fail("mask index {} is outside the output plane of {} (the Pooling that made the mask must have had an input of "
           "upsample's output size)",
           m, out_plane_);
    return static_cast<int64_t>(m);
  }
  int64_t planes_ = 0, in_plane_ = 0, out_plane_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("Upsample", UpsampleDef);
BKS_REGISTER_KERNEL("Upsample", ::bks::DeviceKind::cpu, UpsampleKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
