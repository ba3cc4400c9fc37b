// ONNX writers for the layers with weights or windows: Input, Convolution, Deconvolution,
// InnerProduct, Pooling, LRN, BatchNorm, Scale, Bias.
#include "formats/onnx_export_ops.h"

namespace bks::onnx_export {

namespace {

void write_input(NodeWriter& w) {
  for (size_t i = 0; i < w.node().outputs.size(); ++i) w.graph_input(static_cast<int>(i));
}

// Caffe's pads are the same on both sides of an axis; ONNX lists the starts, then the ends.
std::vector<int64_t> both_sides(const std::vector<int64_t>& pad) {
  std::vector<int64_t> p = pad;
  p.insert(p.end(), pad.begin(), pad.end());
  return p;
}

void conv_attrs(NodeWriter& w, onnx::NodeProto& n) {
  if (w.attr_int("axis") != 1) w.fail("convolution_param.axis {} is not the channel axis 1 ONNX convolves over", w.attr_int("axis"));
  set_attr(n, "kernel_shape", w.attr_ints("kernel"));
  set_attr(n, "strides", w.attr_ints("stride"));
  set_attr(n, "pads", both_sides(w.attr_ints("pad")));
  set_attr(n, "dilations", w.attr_ints("dilation"));
  set_attr(n, "group", w.attr_int("group"));
}

// Convolution weights are (outputs, inputs / group, kh, kw) in both formats; Deconvolution's
// (inputs, outputs / group, kh, kw) are ConvTranspose's.
void write_conv_like(NodeWriter& w, const char* op) {
  std::vector<std::string> in{w.in(0), w.initializer("weight", w.blob(0), w.blob(0).shape())};
  if (w.attr_bool("bias_term")) in.push_back(w.initializer("bias", w.blob(1), w.blob(1).shape()));
  conv_attrs(w, w.add(op, in, {w.out()}));
}

void write_convolution(NodeWriter& w) { write_conv_like(w, "Conv"); }
void write_deconvolution(NodeWriter& w) { write_conv_like(w, "ConvTranspose"); }

void write_inner_product(NodeWriter& w) {
  const Shape& x = w.in_shape(0);
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = w.attr_int("axis");
  if (axis < 0) axis += rank;
  const bool transpose = w.attr_bool("transpose");
  const Tensor& weight = w.blob(0);
  const bool bias = w.attr_bool("bias_term");
  if (axis == 1 || rank == 1) {
    // Gemm on (N, features): Flatten first when the features span several axes.
    std::string in = w.in(0);
    if (rank != 2) {
      std::string flat = w.temp("flat");
      set_attr(w.add("Flatten", {in}, {flat}), "axis", int64_t{1});
      in = flat;
    }
    std::vector<std::string> ins{in, w.initializer("weight", weight, weight.shape())};
    if (bias) ins.push_back(w.initializer("bias", w.blob(1), w.blob(1).shape()));
    onnx::NodeProto& g = w.add("Gemm", ins, {w.out()});
    set_attr(g, "transB", int64_t{transpose ? 0 : 1});
    return;
  }
  if (axis != rank - 1) w.fail("inner_product_param.axis {} of a rank-{} input: ONNX export takes axis 1 or the last axis", axis, rank);
  // MatMul over the last axis with the weights as (inputs, outputs).
  const int64_t outputs = w.attr_int("num_output"), inputs = weight.numel() / outputs;
  Tensor t({inputs, outputs});
  const float* src = weight.f32();
  for (int64_t i = 0; i < inputs; ++i)
    for (int64_t o = 0; o < outputs; ++o) t.f32()[i * outputs + o] = transpose ? src[i * outputs + o] : src[o * inputs + i];
  std::string y = bias ? w.temp("matmul") : w.out();
  w.add("MatMul", {w.in(0), w.initializer("weight", t, {inputs, outputs})}, {y});
  if (bias) w.add("Add", {y, w.initializer("bias", w.blob(1), {outputs})}, {w.out()});
}

// Caffe's windows start at i * stride - pad and its ceil mode keeps a last, partial window
// (dropped when it would start in the end padding). ONNX's floor mode gives the same windows
// with the end pad that reaches the last one; MaxPool pads with -inf, so any end pad does.
// AveragePool divides by the window clipped to input + pad, which ONNX's ceil mode with
// symmetric pads does too.
void write_pooling(NodeWriter& w) {
  const std::string method = w.attr_enum("method");
  if (method != "MAX" && method != "AVE") w.fail("pool: {} has no ONNX operator", method);
  const bool max = method == "MAX";
  if (w.attr_bool("global")) {
    w.add(max ? "GlobalMaxPool" : "GlobalAveragePool", {w.in(0)}, {w.out()});
    return;
  }
  const Shape& x = w.in_shape(0);
  const Shape& y = w.out_shape(0);
  const auto k = w.attr_ints("kernel"), s = w.attr_ints("stride"), p = w.attr_ints("pad");
  if (x.size() != 4 || k.size() != 2) w.fail("ONNX export pools 2-d planes (N, C, H, W)");
  std::vector<int64_t> pads{p[0], p[1], p[0], p[1]};
  bool ceil_mode = false;
  for (int a = 0; a < 2; ++a) {
    const int64_t in = x[2 + a], out = y[2 + a];
    const int64_t need = (out - 1) * s[a] + k[a] - in - p[a];  // the least end pad reaching the last window
    if (need <= p[a] && p[a] <= need + s[a] - 1) continue;      // symmetric pads in floor mode
    if (max) {
      pads[2 + a] = std::max<int64_t>(need, 0);
      continue;
    }
    ceil_mode = true;
    int64_t onnx_out = (in + 2 * p[a] - k[a] + s[a] - 1) / s[a] + 1;
    if ((onnx_out - 1) * s[a] >= in + p[a]) --onnx_out;
    if (onnx_out != out)
      w.fail("average pooling of {} into {} (kernel {}, stride {}, pad {}) has no ONNX AveragePool form", in, out, k[a], s[a], p[a]);
  }
  onnx::NodeProto& n = w.add(max ? "MaxPool" : "AveragePool", {w.in(0)}, {w.out()});
  set_attr(n, "kernel_shape", k);
  set_attr(n, "strides", s);
  set_attr(n, "pads", pads);
  if (ceil_mode) set_attr(n, "ceil_mode", int64_t{1});
  if (!max) set_attr(n, "count_include_pad", int64_t{1});
}

// Both divide alpha by the window size.
void write_lrn(NodeWriter& w) {
  if (w.attr_enum("region") != "ACROSS_CHANNELS") w.fail("norm_region WITHIN_CHANNEL has no ONNX operator");
  onnx::NodeProto& n = w.add("LRN", {w.in(0)}, {w.out()});
  set_attr(n, "size", w.attr_int("local_size"));
  set_attr(n, "alpha", w.attr_float("alpha"));
  set_attr(n, "beta", w.attr_float("beta"));
  set_attr(n, "bias", w.attr_float("k"));
}

// Caffe keeps running sums and their scale factor; ONNX the statistics, with scale 1, bias 0.
void write_batch_norm(NodeWriter& w) {
  if (w.attr_enum("global_stats") == "NEVER")
    w.fail("use_global_stats: false normalizes with the batch's statistics, which ONNX inference does not");
  const Tensor& mean = w.blob(0);
  const Tensor& var = w.blob(1);
  const float sf = w.blob(2).f32()[0];
  const float inv = sf == 0.f ? 0.f : 1.f / sf;
  const int64_t c = mean.numel();
  std::vector<float> m(c), v(c);
  for (int64_t i = 0; i < c; ++i) {
    m[i] = mean.f32()[i] * inv;
    v[i] = var.f32()[i] * inv;
  }
  onnx::NodeProto& n =
      w.add("BatchNormalization",
            {w.in(0), w.initializer("scale", std::vector<float>(c, 1.f), {c}),
             w.initializer("bias", std::vector<float>(c, 0.f), {c}), w.initializer("mean", m, {c}),
             w.initializer("var", v, {c})},
            {w.out()});
  set_attr(n, "epsilon", w.attr_float("eps"));
}

// A blob over the axes [axis, axis + its rank) of x, shaped to broadcast the numpy way
// (trailing ones).
Shape broadcast_shape(NodeWriter& w, const Shape& blob) {
  const auto rank = static_cast<int64_t>(w.in_shape(0).size());
  int64_t axis = w.attr_int("axis");
  if (axis < 0) axis += rank;
  Shape s = blob;
  for (int64_t i = axis + static_cast<int64_t>(blob.size()); i < rank; ++i) s.push_back(1);
  return s;
}

void write_scale(NodeWriter& w) {
  const bool bias = w.attr_bool("bias_term");
  std::string factor;
  int next_blob = 0;
  if (w.num_inputs() > 1) {
    // The factor is the second bottom: reshaped so it broadcasts.
    std::vector<int64_t> shape = broadcast_shape(w, w.in_shape(1));
    std::string r = w.temp("factor");
    w.add("Reshape", {w.in(1), w.int64s("factor_shape", shape)}, {r});
    factor = r;
  } else {
    factor = w.initializer("scale", w.blob(0), broadcast_shape(w, w.blob(0).shape()));
    next_blob = 1;
  }
  std::string y = bias ? w.temp("scaled") : w.out();
  w.add("Mul", {w.in(0), factor}, {y});
  if (bias) {
    const Tensor& b = w.blob(next_blob);
    w.add("Add", {y, w.initializer("bias", b, broadcast_shape(w, b.shape()))}, {w.out()});
  }
}

void write_bias(NodeWriter& w) {
  if (w.num_inputs() > 1) w.fail("a Bias from a second bottom is not exported");
  w.add("Add", {w.in(0), w.initializer("bias", w.blob(0), broadcast_shape(w, w.blob(0).shape()))}, {w.out()});
}

}  // namespace

BKS_ONNX_EXPORT("Input", write_input);
BKS_ONNX_EXPORT("Convolution", write_convolution);
BKS_ONNX_EXPORT("DepthwiseConvolution", write_convolution);
BKS_ONNX_EXPORT("ConvolutionDepthwise", write_convolution);
BKS_ONNX_EXPORT("Deconvolution", write_deconvolution);
BKS_ONNX_EXPORT("InnerProduct", write_inner_product);
BKS_ONNX_EXPORT("Pooling", write_pooling);
BKS_ONNX_EXPORT("LRN", write_lrn);
BKS_ONNX_EXPORT("BatchNorm", write_batch_norm);
BKS_ONNX_EXPORT("Scale", write_scale);
BKS_ONNX_EXPORT("Bias", write_bias);

}  // namespace bks::onnx_export
