// Im2col: the columns a convolution multiplies (Caffe's Im2col layer, convolution_param's
// geometry): each (c, i, j) of channel c and kernel tap (i, j) becomes a channel of the
// output, at the taps' positions for every output location (zero where it reads padding).
// Backward (col2im) sums each column entry back into the input element it copied.
#include <cstdint>

#include "ops/conv_attrs.h"
#include "ops/op.h"

namespace bks {
namespace {

// The geometry: items before the channel axis, channels, the 2-d plane and taps.
struct Im2colGeometry {
  int64_t num = 1, c = 1, h = 1, w = 1, oh = 1, ow = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

Im2colGeometry im2col_geometry(const OpContext& c, const Shape& s) {
  const ConvAttrs& a = c.node.attrs.as<ConvAttrs>();
  int nd = static_cast<int>(s.size());
  int axis = canonical_axis(a.axis, nd, "convolution_param.axis");
  if (nd - axis - 1 != 2)
    c.fail("needs 2 spatial axes after convolution_param.axis {} (shape {}); N-d im2col is not supported", a.axis,
           shape_str(s));
  Im2colGeometry g;
  g.num = shape_count(s, 0, axis);
  g.c = s[axis];
  g.h = s[axis + 1];
  g.w = s[axis + 2];
  g.kh = a.kernel[0], g.kw = a.kernel[1];
  g.sh = a.stride[0], g.sw = a.stride[1];
  g.ph = a.pad[0], g.pw = a.pad[1];
  g.dh = a.dilation[0], g.dw = a.dilation[1];
  int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;
  if (g.h + 2 * g.ph < eh || g.w + 2 * g.pw < ew)
    c.fail("kernel extent {}x{} does not fit the {}x{} input with pad {}x{}", eh, ew, g.h, g.w, g.ph, g.pw);
  g.oh = (g.h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

class Im2colDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const ConvAttrs& a = c.node.attrs.as<ConvAttrs>();
    auto positive = [&](const std::vector<int64_t>& v, const char* field) {
      if (v.size() != 2 || v[0] <= 0 || v[1] <= 0) c.fail("convolution_param.{} must be given and positive", field);
    };
    positive(a.kernel, "kernel_size");
    positive(a.stride, "stride");
    positive(a.dilation, "dilation");
    if (a.pad.size() != 2 || a.pad[0] < 0 || a.pad[1] < 0) c.fail("convolution_param.pad must not be negative");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    Im2colGeometry g = im2col_geometry(c, in[0]);
    int axis = static_cast<int>(in[0].size()) - 3;
    out[0] = in[0];
    if (!checked_product({g.c, g.kh, g.kw}, INT64_MAX, out[0][axis]))
      c.fail("{} channels times the {}x{} kernel overflow", g.c, g.kh, g.kw);
    out[0][axis + 1] = g.oh;
    out[0][axis + 2] = g.ow;
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class Im2colKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = im2col_geometry(context(), in[0]);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    each_tap([&](int64_t col, int64_t src) { y[col] = src < 0 ? 0.f : x[src]; });
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    c.in_grad[0]->zero();
    each_tap([&](int64_t col, int64_t src) {
      if (src >= 0) dx[src] += dy[col];
    });
  }

 private:
  // Calls f(column index, input index or -1 for padding) for every output element.
  template <class F>
  void each_tap(F f) const {
    const Im2colGeometry& g = g_;
    int64_t col = 0;
    for (int64_t n = 0; n < g.num; ++n)
      for (int64_t ch = 0; ch < g.c; ++ch)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j)
            for (int64_t oy = 0; oy < g.oh; ++oy) {
              int64_t iy = oy * g.sh - g.ph + i * g.dh;
              for (int64_t ox = 0; ox < g.ow; ++ox, ++col) {
                int64_t ix = ox * g.sw - g.pw + j * g.dw;
                bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                f(col, inside ? ((n * g.c + ch) * g.h + iy) * g.w + ix : -1);
              }
            }
  }
  Im2colGeometry g_;
};

}  // namespace

BKS_REGISTER_ATTRS("Im2col", ConvAttrs, conv_from_caffe, conv_to_caffe);
BKS_REGISTER_OP_DEF("Im2col", Im2colDef);
BKS_REGISTER_KERNEL("Im2col", ::bks::DeviceKind::cpu, Im2colKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
