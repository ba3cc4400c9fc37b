// Deconvolution (transposed convolution): the forward pass is a convolution's backward-data
// pass, with Caffe's weight layout (input channels, output channels / group, kh, kw).
#include "ops/conv_kernels.h"
#include "ops/op.h"

namespace bks {
namespace {

// The equivalent convolution, from the deconvolution's output (src) to its input `in` (dst).
ConvGeometry deconv_geometry(const OpContext& c, const Shape& in) {
  ConvGeometry g = parse_conv_layer(c);
  c.expect_ndim(in, 4, 4, "bottom");
  g.n = in[0];
  g.oc = in[1];
  g.oh = in[2];
  g.ow = in[3];
  g.c = c.node.attrs.as<ConvAttrs>().num_output;
  if (g.c % g.group || g.oc % g.group)
    c.fail("channels {} and num_output {} must both be divisible by group {}", g.oc, g.c, g.group);
  g.h = g.sh * (g.oh - 1) + (g.dh * (g.kh - 1) + 1) - 2 * g.ph;
  g.w = g.sw * (g.ow - 1) + (g.dw * (g.kw - 1) + 1) - 2 * g.pw;
  if (g.h <= 0 || g.w <= 0) c.fail("output size {}x{} is not positive", g.h, g.w);
  return g;
}

class DeconvolutionDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { parse_conv_layer(c); }

  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    ConvGeometry g = deconv_geometry(c, in[0]);
    out[0] = {g.n, g.c, g.h, g.w};
  }

  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const ConvAttrs& a = c.node.attrs.as<ConvAttrs>();
    ConvGeometry g = deconv_geometry(c, in[0]);
    std::vector<ParamDecl> d{{{g.oc, g.c / g.group, g.kh, g.kw}, a.weight_filler, true}};
    if (a.bias_term) d.push_back({{g.c}, a.bias_filler, true});
    return d;
  }
};

class DeconvolutionKernel final : public Kernel {
 public:
  explicit DeconvolutionKernel(const OpInit& init)
      : Kernel(init), bias_term_(init.node.attrs.as<ConvAttrs>().bias_term) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = deconv_geometry(context(), in[0]);
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    // Backward-data is needed even for inference, so always build the training set.
    k_.prepare(static_cast<CpuBackend&>(backend_).engine(), g_, false, true);
  }

  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    float* y = c.out[0]->f32();
    k_.backward_data(s, c.in[0]->f32(), c.params[0]->f32(), y);
    if (!bias_term_) return;
    const float* b = c.params[1]->f32();
    int64_t hw = g_.h * g_.w;
#pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < g_.n; ++n)
      for (int64_t ch = 0; ch < g_.c; ++ch) {
        float* p = y + (n * g_.c + ch) * hw;
        for (int64_t i = 0; i < hw; ++i) p[i] += b[ch];
      }
  }

  void backward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) k_.backward_weights(s, dy, c.in[0]->f32(), c.param_grad[0]->f32(), nullptr);
    if (bias_term_ && c.param_grad[1]) {
      float* db = c.param_grad[1]->f32();
      int64_t hw = g_.h * g_.w;
      for (int64_t ch = 0; ch < g_.c; ++ch) {
        double acc = 0;
        for (int64_t n = 0; n < g_.n; ++n) {
          const float* p = dy + (n * g_.c + ch) * hw;
          for (int64_t i = 0; i < hw; ++i) acc += p[i];
        }
        db[ch] = static_cast<float>(acc);
      }
    }
    if (c.in_grad[0]) k_.forward(s, dy, c.params[0]->f32(), nullptr, c.in_grad[0]->f32());
  }

  std::string kernel_name() const override { return "oneDNN " + k_.name(); }

 private:
  bool bias_term_;
  ConvGeometry g_;
  ConvKernels k_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Deconvolution", DeconvolutionDef);
BKS_REGISTER_ATTRS("Deconvolution", ConvAttrs, conv_from_caffe, conv_to_caffe);
BKS_REGISTER_KERNEL("Deconvolution", ::bks::DeviceKind::cpu, DeconvolutionKernel, "oneDNN", 10, nullptr);

}  // namespace bks
