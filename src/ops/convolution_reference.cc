// Reference kernels of Convolution and Deconvolution: Caffe's definition as nested loops
// over plain NCHW float32 data, summing in double. They register below oneDNN
// (kReferencePriority), so production never runs them; the op tests use them as the oracle
// that oneDNN and any future backend are compared to. Readable first, fast never.
#include <cstdint>
#include <numeric>

#include "ops/conv_kernels.h"
#include "ops/op.h"

namespace bks {
namespace {

// What these kernels read from the node: the window (kernel, stride, pad, dilation, group)
// the definition checked, and bias_term.
struct ConvSetup {
  ConvGeometry window;  // kh..group; the shapes come from reshape()
  bool bias = false;
};

ConvSetup conv_setup(const OpContext& c) { return {parse_conv_layer(c), c.node.attrs.as<ConvAttrs>().bias_term}; }

// No post-ops (and, registered for fp32, neither bf16 nor INT8): deploy's decisions are
// left to the oneDNN kernel.
bool reference_supports(const OpInit& i) { return !i.node.deploy.fusion.any(); }

// The convolution from `src` (N, C, H, W) to `dst` (N, OC, OH, OW) through `window`; the
// output size rule is the definition's (the shapes arrive from shape inference).
ConvGeometry conv_between(ConvGeometry g, const Shape& src, const Shape& dst) {
  g.n = src[0];
  g.c = src[1];
  g.h = src[2];
  g.w = src[3];
  g.oc = dst[1];
  g.oh = dst[2];
  g.ow = dst[3];
  return g;
}

// The three loops of one convolution g: src (n, c, h, w), dst (n, oc, oh, ow), weights
// (oc, c / group, kh, kw). Output pixel (oy, ox) reads input pixel
// (oy * sh - ph + i * dh, ox * sw - pw + j * dw) through weight (i, j); outside the input
// reads zero. Deconvolution is the same arithmetic with forward and backward-data swapped.
class ConvLoops {
 public:
  explicit ConvLoops(const ConvGeometry& g) : g_(g), icg_(g.c / g.group), ocg_(g.oc / g.group) {}

  // dst = conv(src, wei) + bias[o] (no bias when null).
  void forward(const float* src, const float* wei, const float* bias, float* dst) const {
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t o = 0; o < g_.oc; ++o)
        for (int64_t oy = 0; oy < g_.oh; ++oy)
          for (int64_t ox = 0; ox < g_.ow; ++ox) {
            double acc = bias ? bias[o] : 0.0;
            int64_t group = o / ocg_;
            for (int64_t ci = 0; ci < icg_; ++ci)
              for (int64_t i = 0; i < g_.kh; ++i)
                for (int64_t j = 0; j < g_.kw; ++j) {
                  int64_t iy = oy * g_.sh - g_.ph + i * g_.dh, ix = ox * g_.sw - g_.pw + j * g_.dw;
                  if (!inside(iy, ix)) continue;
                  acc += static_cast<double>(wei[wei_at(o, ci, i, j)]) * src[src_at(n, group * icg_ + ci, iy, ix)];
                }
            dst[dst_at(n, o, oy, ox)] = static_cast<float>(acc);
          }
  }

  // dsrc = the transpose of forward applied to ddst, + bias[c] (no bias when null): each
  // input pixel gathers the output pixels whose windows read it.
  void backward_data(const float* ddst, const float* wei, const float* bias, float* dsrc) const {
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t ch = 0; ch < g_.c; ++ch)
        for (int64_t iy = 0; iy < g_.h; ++iy)
          for (int64_t ix = 0; ix < g_.w; ++ix) {
            double acc = bias ? bias[ch] : 0.0;
            int64_t group = ch / icg_, ci = ch % icg_;
            const Taps rows = taps_reaching(iy, g_.ph, g_.sh, g_.dh), cols = taps_reaching(ix, g_.pw, g_.sw, g_.dw);
            for (int64_t o = group * ocg_; o < (group + 1) * ocg_; ++o)
              for (int64_t i = rows.first; i < g_.kh; i += rows.step)
                for (int64_t j = cols.first; j < g_.kw; j += cols.step) {
                  // Output (oy, ox) reads (iy, ix) through (i, j) when oy * sh = iy + ph - i * dh.
                  int64_t ty = iy + g_.ph - i * g_.dh, tx = ix + g_.pw - j * g_.dw;
                  if (ty < 0 || tx < 0) continue;
                  int64_t oy = ty / g_.sh, ox = tx / g_.sw;
                  if (oy >= g_.oh || ox >= g_.ow) continue;
                  acc += static_cast<double>(wei[wei_at(o, ci, i, j)]) * ddst[dst_at(n, o, oy, ox)];
                }
            dsrc[src_at(n, ch, iy, ix)] = static_cast<float>(acc);
          }
  }

  // dwei[o][ci][i][j] = sum over n, oy, ox of ddst times the src pixel that weight read.
  void backward_weights(const float* src, const float* ddst, float* dwei) const {
    for (int64_t o = 0; o < g_.oc; ++o)
      for (int64_t ci = 0; ci < icg_; ++ci)
        for (int64_t i = 0; i < g_.kh; ++i)
          for (int64_t j = 0; j < g_.kw; ++j) {
            double acc = 0.0;
            int64_t ch = (o / ocg_) * icg_ + ci;
            for (int64_t n = 0; n < g_.n; ++n)
              for (int64_t oy = 0; oy < g_.oh; ++oy)
                for (int64_t ox = 0; ox < g_.ow; ++ox) {
                  int64_t iy = oy * g_.sh - g_.ph + i * g_.dh, ix = ox * g_.sw - g_.pw + j * g_.dw;
                  if (!inside(iy, ix)) continue;
                  acc += static_cast<double>(ddst[dst_at(n, o, oy, ox)]) * src[src_at(n, ch, iy, ix)];
                }
            dwei[wei_at(o, ci, i, j)] = static_cast<float>(acc);
          }
  }

 private:
  // The taps through which input position `pos` reaches an output position: those i with
  // pos + pad - i * dil a multiple of the stride, every stride / gcd(stride, dil)-th tap from
  // the first. Visiting only those keeps FCN's 64-wide, stride-32 upsampling at 2 taps per
  // axis instead of 64 (minutes per backward pass otherwise).
  struct Taps {
    int64_t first, step;
  };
  static Taps taps_reaching(int64_t pos, int64_t pad, int64_t stride, int64_t dil) {
    const int64_t step = stride / std::gcd(stride, dil);
    for (int64_t i = 0; i < step; ++i)
      if ((pos + pad - i * dil) % stride == 0) return {i, step};
    return {INT64_MAX, step};  // none: gcd(stride, dil) does not divide pos + pad
  }
  bool inside(int64_t y, int64_t x) const { return y >= 0 && y < g_.h && x >= 0 && x < g_.w; }
  int64_t src_at(int64_t n, int64_t ch, int64_t y, int64_t x) const { return ((n * g_.c + ch) * g_.h + y) * g_.w + x; }
  int64_t dst_at(int64_t n, int64_t o, int64_t y, int64_t x) const { return ((n * g_.oc + o) * g_.oh + y) * g_.ow + x; }
  int64_t wei_at(int64_t o, int64_t ci, int64_t i, int64_t j) const {
    return ((o * icg_ + ci) * g_.kh + i) * g_.kw + j;
  }

  ConvGeometry g_;
  int64_t icg_, ocg_;  // input and output channels per group
};

// sums[ch] = the sum of t (n, channels, plane) over n and the plane: a bias gradient.
void channel_sums(const Tensor& t, float* sums) {
  int64_t n = t.dim(0), channels = t.dim(1), plane = t.numel() / (n * channels);
  for (int64_t ch = 0; ch < channels; ++ch) {
    double acc = 0.0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t k = 0; k < plane; ++k) acc += t.f32()[(b * channels + ch) * plane + k];
    sums[ch] = static_cast<float>(acc);
  }
}

class ConvolutionReference final : public Kernel {
 public:
  explicit ConvolutionReference(const OpInit& i) : Kernel(i), setup_(conv_setup(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    g_ = conv_between(setup_.window, in[0], out[0]);
  }

  void forward(OpCall& c) override {
    const float* bias = setup_.bias ? c.params[1]->f32() : nullptr;
    ConvLoops(g_).forward(c.in[0]->f32(), c.params[0]->f32(), bias, c.out[0]->f32());
  }

  void backward(OpCall& c) override {
    ConvLoops loops(g_);
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) loops.backward_weights(c.in[0]->f32(), dy, c.param_grad[0]->f32());
    if (setup_.bias && c.param_grad[1]) channel_sums(*c.out_grad[0], c.param_grad[1]->f32());
    if (c.in_grad[0]) loops.backward_data(dy, c.params[0]->f32(), nullptr, c.in_grad[0]->f32());
  }

  std::string kernel_name() const override { return "reference loops"; }

 private:
  ConvSetup setup_;
  ConvGeometry g_;
};

// Deconvolution y = conv^T(x) + b: the convolution runs from y (num_output channels) to x,
// with the same weights (x's channels, num_output / group, kh, kw).
class DeconvolutionReference final : public Kernel {
 public:
  explicit DeconvolutionReference(const OpInit& i) : Kernel(i), setup_(conv_setup(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    g_ = conv_between(setup_.window, out[0], in[0]);
  }

  void forward(OpCall& c) override {
    const float* bias = setup_.bias ? c.params[1]->f32() : nullptr;
    ConvLoops(g_).backward_data(c.in[0]->f32(), c.params[0]->f32(), bias, c.out[0]->f32());
  }

  void backward(OpCall& c) override {
    ConvLoops loops(g_);
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) loops.backward_weights(dy, c.in[0]->f32(), c.param_grad[0]->f32());
    if (setup_.bias && c.param_grad[1]) channel_sums(*c.out_grad[0], c.param_grad[1]->f32());
    if (c.in_grad[0]) loops.forward(dy, c.params[0]->f32(), nullptr, c.in_grad[0]->f32());
  }

  std::string kernel_name() const override { return "reference loops"; }

 private:
  ConvSetup setup_;
  ConvGeometry g_;
};

}  // namespace

BKS_REGISTER_KERNEL("Convolution", ::bks::DeviceKind::cpu, ConvolutionReference, "reference", kReferencePriority,
                    reference_supports);
// The forks' depthwise types are Convolution under other names (ops/convolution.cc).
BKS_REGISTER_KERNEL("DepthwiseConvolution", ::bks::DeviceKind::cpu, ConvolutionReference, "reference",
                    kReferencePriority, reference_supports);
BKS_REGISTER_KERNEL("ConvolutionDepthwise", ::bks::DeviceKind::cpu, ConvolutionReference, "reference",
                    kReferencePriority, reference_supports);
BKS_REGISTER_KERNEL("Deconvolution", ::bks::DeviceKind::cpu, DeconvolutionReference, "reference", kReferencePriority,
                    reference_supports);

}  // namespace bks
