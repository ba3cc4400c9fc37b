// Deconvolution (transposed convolution): the forward pass is a convolution's backward-data
// pass, with Caffe's weight layout (input channels, output channels / group, kh, kw).
#include "ops/conv_kernels.h"
#include "ops/op.h"

namespace bks {
namespace {

class DeconvolutionOp final : public Op {
 public:
  explicit DeconvolutionOp(const OpInit& init) : Op(init), p_(init.node.param.convolution_param()) {
    if (!init.node.param.has_convolution_param()) fail("convolution_param is required");
    if (p_.num_output() == 0) fail("convolution_param.num_output must be positive");
    parse_conv_param(p_, g_, [this](const std::string& m) { fail("convolution_param: {}", m); });
  }
  int min_inputs() const override { return 1; }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    expect_ndim(in[0], 4, 4, "bottom");
    // g_ describes the equivalent convolution: from the deconvolution's output (src) to its
    // input (dst).
    g_.n = in[0][0];
    g_.oc = in[0][1];
    g_.oh = in[0][2];
    g_.ow = in[0][3];
    g_.c = p_.num_output();
    if (g_.c % g_.group || g_.oc % g_.group)
      fail("channels {} and num_output {} must both be divisible by group {}", g_.oc, g_.c, g_.group);
    g_.h = g_.sh * (g_.oh - 1) + (g_.dh * (g_.kh - 1) + 1) - 2 * g_.ph;
    g_.w = g_.sw * (g_.ow - 1) + (g_.dw * (g_.kw - 1) + 1) - 2 * g_.pw;
    if (g_.h <= 0 || g_.w <= 0) fail("output size {}x{} is not positive", g_.h, g_.w);
    out[0] = {g_.n, g_.c, g_.h, g_.w};
  }

  std::vector<ParamDecl> declare_params(const std::vector<Shape>& in) override {
    std::vector<ParamDecl> d{{{g_.oc, g_.c / g_.group, g_.kh, g_.kw}, p_.weight_filler(), true}};
    if (p_.bias_term()) d.push_back({{g_.c}, p_.bias_filler(), true});
    return d;
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    // Backward-data is needed even for inference, so always build the training set.
    k_.prepare(static_cast<CpuBackend&>(backend_).engine(), g_, false, true);
  }

  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    float* y = c.out[0]->f32();
    k_.backward_data(s, c.in[0]->f32(), c.params[0]->f32(), y);
    if (!p_.bias_term()) return;
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
    if (p_.bias_term() && c.param_grad[1]) {
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
  proto::ConvolutionParameter p_;
  ConvGeometry g_;
  ConvKernels k_;
};

}  // namespace

BKS_REGISTER_OP("Deconvolution", DeconvolutionOp);

}  // namespace bks
