// Convolution: Caffe's layer on oneDNN (direct/winograd/gemm chosen by oneDNN for the ISA).
// The MobileNet/ShuffleNet forks' depthwise layers are this op under their own type names
// (same attributes, definition and kernels): DepthwiseConvolution (yonghenglh6's fork, a
// Convolution on the CPU) and ConvolutionDepthwise (farmingyard's and sp2823's, with one
// output channel per input channel: group and num_output are the bottom's channels).
#include <algorithm>

#include "ops/conv_kernels.h"
#include "ops/op.h"

namespace bks {
namespace {

// Checks the layer's attributes: convolution_param, INT8 thresholds, the chosen kernel and
// fused post-ops (set by bakusoku deploy, inference only).
void check_convolution(const OpContext& c) {
  parse_conv_layer(c);
  int8_thresholds(c);
  const std::string& choice = c.node.deploy.kernel;
  if (!choice.empty() && choice != "direct" && choice != "winograd" && choice != "winograd_f4" && choice != "dw_int8")
    c.fail("the chosen kernel must be \"direct\", \"winograd\", \"winograd_f4\" or \"dw_int8\", got \"{}\"", choice);
  const FusedPostOps& f = c.node.deploy.fusion;
  if (f.any() && c.phase == proto::TRAIN)
    c.fail("fused post-ops are for inference graphs (bakusoku deploy), not TRAIN");
}

// The convolution from an input of shape `in` (N, C, H, W), with Caffe's output size rule.
ConvGeometry conv_geometry(const OpContext& c, const Shape& in) {
  ConvGeometry g = parse_conv_layer(c);
  c.expect_ndim(in, 4, 4, "bottom");
  g.n = in[0];
  g.c = in[1];
  g.h = in[2];
  g.w = in[3];
  g.oc = c.node.attrs.as<ConvAttrs>().num_output;
  if (g.c % g.group || g.oc % g.group)
    c.fail("channels {} and num_output {} must both be divisible by group {}", g.c, g.oc, g.group);
  g.oh = conv_out_size(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = conv_out_size(g.w, g.kw, g.sw, g.pw, g.dw);
  if (g.oh <= 0 || g.ow <= 0)
    c.fail("kernel {}x{} does not fit the {}x{} input with pad {}x{}", g.kh, g.kw, g.h, g.w, g.ph, g.pw);
  return g;
}

class ConvolutionDef : public OpDef {
 public:
  // A fused residual sum (bakusoku deploy) reads a second bottom.
  int min_inputs(const OpContext& c) const override { return c.node.deploy.fusion.residual_sum ? 2 : 1; }
  void check(const OpContext& c) const override { check_convolution(c); }

  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    ConvGeometry g = conv_geometry(c, in[0]);
    out[0] = {g.n, g.oc, g.oh, g.ow};
    if (c.node.deploy.fusion.residual_sum && in[1] != out[0])
      c.fail("fused residual has shape {} but the output is {}", shape_str(in[1]), shape_str(out[0]));
  }

  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const ConvAttrs& a = c.node.attrs.as<ConvAttrs>();
    ConvGeometry g = conv_geometry(c, in[0]);
    std::vector<ParamDecl> d{{{g.oc, g.c / g.group, g.kh, g.kw}, a.weight_filler, true}};
    if (a.bias_term) d.push_back({{g.oc}, a.bias_filler, true});
    return d;
  }

  OpTraits traits(const Node&) const override {
    return traits_with({&OpTraits::weighted_linear, &OpTraits::convolution});
  }
  int64_t output_channels(const Node& n) const override { return n.attrs.as<ConvAttrs>().num_output; }
  bool has_bias(const Node& n) const override { return n.attrs.as<ConvAttrs>().bias_term; }
  void set_bias_term(Node& n) const override { n.attrs.as<ConvAttrs>().bias_term = true; }
  bool pads_input(const Node& n) const override {
    const auto& pad = n.attrs.as<ConvAttrs>().pad;
    return std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p != 0; });
  }
  // Ungrouped: mixes channels; depthwise (a group per channel, one filter each): per channel.
  ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const override {
    const ConvAttrs& a = n.attrs.as<ConvAttrs>();
    if (a.axis != 1 || n.deploy.fusion.residual_sum || in.empty() || in[0].size() < 2) return ChannelFlow::blocks;
    if (a.group == 1) return ChannelFlow::mixes;
    return a.group == in[0][1] && a.num_output == a.group ? ChannelFlow::per_channel : ChannelFlow::blocks;
  }
  void set_channels(Node& n, int64_t channels) const override {
    ConvAttrs& a = n.attrs.as<ConvAttrs>();
    if (a.group != 1) a.group = channels;
    a.num_output = channels;
  }
};

// ConvolutionDepthwise: the fork ignores group and num_output and makes one output channel
// per input channel, with weights of C x 1 x kh x kw. Its attributes hold group =
// num_output (see depthwise_from_caffe), so it is that Convolution once the bottom's
// channels are num_output; anything else is an error, not the fork's silent resize.
class ConvolutionDepthwiseDef final : public ConvolutionDef {
 public:
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.expect_ndim(in[0], 4, 4, "bottom");
    int64_t n = c.node.attrs.as<ConvAttrs>().num_output;
    if (in[0][1] != n)
      c.fail(
          "convolution_param.num_output {} must equal the bottom's {} channels ({}): ConvolutionDepthwise makes "
          "one output channel per input channel",
          n, in[0][1], shape_str(in[0]));
    ConvolutionDef::infer(c, in, out);
  }
};

void depthwise_from_caffe(const proto::LayerParameter& l, ConvAttrs& a, const std::string& where) {
  conv_from_caffe(l, a, where);
  if (!l.convolution_param().has_num_output())
    input_error("{}: convolution_param.num_output must be given, equal to the bottom's channels", where);
  a.group = a.num_output;
}

class ConvolutionKernel final : public Kernel {
 public:
  explicit ConvolutionKernel(const OpInit& init)
      : Kernel(init),
        bias_term_(init.node.attrs.as<ConvAttrs>().bias_term),
        fusion_(init.node.deploy.fusion),
        choice_(init.node.deploy.kernel),
        blocked_(init.blocked_activations),
        bf16_output_(init.node.deploy.bf16_output) {
    int8_ = int8_thresholds(context());
    fused_ = fusion_.any();
    if (bf16_output_ && !bf16_) fail("deploy.bf16_output needs deploy.precision bf16");
  }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = conv_geometry(context(), in[0]);
  }

  LayoutRule layout_rule() const override { return LayoutRule::any_in_any_out; }
  dnnl::memory::desc preferred_output_layout(int, const std::vector<dnnl::memory::desc>& in) override {
    auto& eng = static_cast<CpuBackend&>(backend_).engine();
    if (int8_.in > 0.f)
      return ConvKernels::preferred_int8_dst(eng, g_, bias_term_, in.empty() ? memory::desc() : in[0], &fusion_,
                                             int8_output_type(fusion_.relu && fusion_.relu_slope == 0.f, int8_.out));
    if (bf16_output_ && phase_ != proto::TRAIN)
      return ConvKernels::preferred_bf16_dst(eng, g_, bias_term_, in.empty() ? memory::desc() : in[0]);
    return ConvKernels::preferred_dst(eng, g_, bias_term_, phase_ == proto::TRAIN, blocked_);
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    auto& be = static_cast<CpuBackend&>(backend_);
    auto layout = [](const std::vector<memory::desc>& l, size_t i) { return i < l.size() ? l[i] : memory::desc(); };
    k_.set_constant_weights(constant_params_ && phase_ != proto::TRAIN);
    k_.set_algorithm_choice(choice_);
    k_.set_bf16(bf16_ && phase_ != proto::TRAIN);
    k_.set_int8_thresholds(int8_);
    k_.prepare(be.engine(), g_, bias_term_, phase_ == proto::TRAIN, layout(in_layout_, 0), layout(out_layout_, 0),
               needs_input_grad(0), fused_ ? &fusion_ : nullptr, layout(in_layout_, 1), output_in_input_buffer_);
  }

  // At inference a fused residual (input 1) may already be in the output's buffer.
  int output_adds_onto_input() const override { return fusion_.residual_sum && phase_ != proto::TRAIN ? 1 : -1; }

  void forward(OpCall& c) override {
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    k_.forward(s, c.in[0]->raw(), c.params[0]->f32(), bias_term_ ? c.params[1]->f32() : nullptr, c.out[0]->raw(),
               fusion_.residual_sum ? c.in[1]->f32() : nullptr);
  }

  void backward(OpCall& c) override {
    if (phase_ != proto::TRAIN) fail("backward needs a TRAIN-phase net");
    auto& s = static_cast<CpuBackend&>(backend_).stream();
    float* dbias = bias_term_ && c.param_grad[1] ? c.param_grad[1]->f32() : nullptr;
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

  std::string kernel_name() const override {
    const std::string& a = k_.algorithm();
    return a == "winograd_f4" || a == "dw_int8" ? k_.name() : "oneDNN " + k_.name();  // bakusoku's own
  }
  std::string tuning_decision() const override { return constant_params_ ? k_.algorithm() : ""; }

 private:
  bool bias_term_;
  ConvGeometry g_;
  ConvKernels k_;
  Tensor wscratch_;
  FusedPostOps fusion_;
  bool fused_ = false;
  std::string choice_;
  bool blocked_ = false;  // NetOptions::blocked_activations
  bool bf16_output_ = false;  // writes bf16 for bf16 readers (deploy --precision bf16)
  Int8Thresholds int8_;
};

}  // namespace

BKS_REGISTER_OP_DEF("Convolution", ConvolutionDef);
BKS_REGISTER_ATTRS("Convolution", ConvAttrs, conv_from_caffe, conv_to_caffe);
BKS_REGISTER_KERNEL_FOR("Convolution", ::bks::DeviceKind::cpu, ConvolutionKernel, "oneDNN", 10, nullptr,
                        {::bks::Precision::fp32, ::bks::Precision::bf16, ::bks::Precision::int8});

BKS_REGISTER_OP_DEF("DepthwiseConvolution", ConvolutionDef);
BKS_REGISTER_ATTRS("DepthwiseConvolution", ConvAttrs, conv_from_caffe, conv_to_caffe);
BKS_REGISTER_KERNEL_FOR("DepthwiseConvolution", ::bks::DeviceKind::cpu, ConvolutionKernel, "oneDNN", 10, nullptr,
                        {::bks::Precision::fp32, ::bks::Precision::bf16, ::bks::Precision::int8});

BKS_REGISTER_OP_DEF("ConvolutionDepthwise", ConvolutionDepthwiseDef);
BKS_REGISTER_ATTRS("ConvolutionDepthwise", ConvAttrs, depthwise_from_caffe, conv_to_caffe);
BKS_REGISTER_KERNEL_FOR("ConvolutionDepthwise", ::bks::DeviceKind::cpu, ConvolutionKernel, "oneDNN", 10, nullptr,
                        {::bks::Precision::fp32, ::bks::Precision::bf16, ::bks::Precision::int8});

}  // namespace bks
