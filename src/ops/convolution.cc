// Convolution: Caffe's layer on oneDNN (direct/winograd/gemm chosen by oneDNN for the ISA).
#include "ops/conv_kernels.h"
#include "ops/op.h"

namespace bks {
namespace {

class ConvolutionOp final : public Op {
 public:
  explicit ConvolutionOp(const OpInit& init) : Op(init), p_(init.node.param.convolution_param()) {
    if (!init.node.param.has_convolution_param()) fail("convolution_param is required");
    if (p_.num_output() == 0) fail("convolution_param.num_output must be positive");
    parse_conv_param(p_, g_, [this](const std::string& m) { fail("convolution_param: {}", m); });
    fusion_ = init.node.param.fusion_param();
    choice_ = init.node.param.kernel_choice();
    read_int8_thresholds(init, int8_threshold_, int8_out_threshold_);
    if (!choice_.empty() && choice_ != "direct" && choice_ != "winograd")
      fail("kernel_choice must be \"direct\" or \"winograd\", got \"{}\"", choice_);
    fused_ = fusion_.residual_sum() || fusion_.relu();
    if (fused_ && init.phase == proto::TRAIN) fail("fusion_param is for inference graphs (bakusoku deploy), not TRAIN");
  }
  // A fused residual sum (bakusoku deploy) reads a second bottom.
  int min_inputs() const override { return fusion_.residual_sum() ? 2 : 1; }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    expect_ndim(in[0], 4, 4, "bottom");
    g_.n = in[0][0];
    g_.c = in[0][1];
    g_.h = in[0][2];
    g_.w = in[0][3];
    g_.oc = p_.num_output();
    if (g_.c % g_.group || g_.oc % g_.group)
      fail("channels {} and num_output {} must both be divisible by group {}", g_.c, g_.oc, g_.group);
    g_.oh = conv_out_size(g_.h, g_.kh, g_.sh, g_.ph, g_.dh);
    g_.ow = conv_out_size(g_.w, g_.kw, g_.sw, g_.pw, g_.dw);
    if (g_.oh <= 0 || g_.ow <= 0)
      fail("kernel {}x{} does not fit the {}x{} input with pad {}x{}", g_.kh, g_.kw, g_.h, g_.w, g_.ph, g_.pw);
    out[0] = {g_.n, g_.oc, g_.oh, g_.ow};
    if (fusion_.residual_sum() && in[1] != out[0])
      fail("fused residual has shape {} but the output is {}", shape_str(in[1]), shape_str(out[0]));
  }

  std::vector<ParamDecl> declare_params(const std::vector<Shape>& in) override {
    std::vector<ParamDecl> d{{{g_.oc, g_.c / g_.group, g_.kh, g_.kw}, p_.weight_filler(), true}};
    if (p_.bias_term()) d.push_back({{g_.oc}, p_.bias_filler(), true});
    return d;
  }

  LayoutRule layout_rule() const override { return LayoutRule::any_in_any_out; }
  dnnl::memory::desc preferred_output_layout(int, const std::vector<dnnl::memory::desc>& in) override {
    auto& eng = static_cast<CpuBackend&>(backend_).engine();
    if (int8_threshold_ > 0.f)
      return ConvKernels::preferred_int8_dst(eng, g_, p_.bias_term(), in.empty() ? memory::desc() : in[0], &fusion_,
                                             int8_output_type(fusion_.relu() && fusion_.relu_negative_slope() == 0.f, int8_out_threshold_));
    return ConvKernels::preferred_dst(eng, g_, p_.bias_term(), phase_ == proto::TRAIN);
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    auto& be = static_cast<CpuBackend&>(backend_);
    auto layout = [](const std::vector<memory::desc>& l, size_t i) { return i < l.size() ? l[i] : memory::desc(); };
    k_.set_constant_weights(constant_params_ && phase_ != proto::TRAIN);
    k_.set_algorithm_choice(choice_);
    k_.set_bf16(bf16_ && phase_ != proto::TRAIN);
    k_.set_int8_thresholds(int8_threshold_, int8_out_threshold_);
    k_.prepare(be.engine(), g_, p_.bias_term(), phase_ == proto::TRAIN, layout(in_layout_, 0), layout(out_layout_, 0),
               needs_input_grad(0), fused_ ? &fusion_ : nullptr, layout(in_layout_, 1));
  }

  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    k_.forward(s, c.in[0]->raw(), c.params[0]->f32(), p_.bias_term() ? c.params[1]->f32() : nullptr, c.out[0]->raw(),
               fusion_.residual_sum() ? c.in[1]->f32() : nullptr);
  }

  void backward(OpCall& c) override {
    if (phase_ != proto::TRAIN) fail("backward needs a TRAIN-phase net");
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    float* dbias = p_.bias_term() && c.param_grad[1] ? c.param_grad[1]->f32() : nullptr;
    if (c.param_grad[0] || dbias) {
      float* dw = c.param_grad[0] ? c.param_grad[0]->f32() : nullptr;
      if (!dw) {
        wscratch_.reshape(c.params[0]->shape());
        dw = wscratch_.f32();
      }
      k_.backward_weights(s, c.in[0]->f32(), c.out_grad[0]->f32(), dw, dbias);
    }
    if (c.in_grad[0]) k_.backward_data(s, c.out_grad[0]->f32(), c.params[0]->f32(), c.in_grad[0]->f32());
  }

  std::string kernel_name() const override { return "oneDNN " + k_.name(); }
  std::string tuning_decision() const override { return constant_params_ ? k_.algorithm() : ""; }

 private:
  proto::ConvolutionParameter p_;
  ConvGeometry g_;
  ConvKernels k_;
  Tensor wscratch_;
  proto::FusionParameter fusion_;
  bool fused_ = false;
  std::string choice_;
  float int8_threshold_ = 0.f, int8_out_threshold_ = 0.f;
};

}  // namespace

BKS_REGISTER_OP("Convolution", ConvolutionOp);

}  // namespace bks
