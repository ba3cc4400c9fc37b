// Convolution, dense, normalisation and pooling nodes as Caffe's Convolution, InnerProduct,
// BatchNorm + Scale and Pooling layers (and bakusoku's BatchMatMul and LayerNorm), their
// weights laid out as those layers read them.
#include <algorithm>
#include <cmath>

#include "formats/onnx_ops.h"

namespace bks::onnx_import {
namespace {

void need_rank(const NodeCtx& c, const Shape& s, size_t rank, const char* what) {
  if (s.size() != rank)
    input_error("{}: {} has shape [{}]; only rank {} is supported", c.where(), what, fmt::join(s, ","), rank);
}

// The window's (top, left, bottom, right) pads, auto_pad resolved.
std::vector<int64_t> window_pads(const NodeCtx& c, const Shape& in, const std::vector<int64_t>& k,
                                 const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  std::vector<int64_t> pads = c.attr_ints("pads", {0, 0, 0, 0});
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      const int64_t out = (in[2 + a] + s[a] - 1) / s[a];
      const int64_t total = std::max<int64_t>(0, (out - 1) * s[a] + (k[a] - 1) * d[a] + 1 - in[2 + a]);
      pads[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[a + 2] = total - pads[a];
    }
  } else if (auto_pad != "NOTSET") {
    input_error("{}: auto_pad '{}' is not an ONNX value", c.where(), auto_pad);
  }
  if (pads.size() != 4) input_error("{}: pads has {} values; 4 expected for a 2-d window", c.where(), pads.size());
  for (int64_t p : pads)
    if (p < 0) input_error("{}: negative pads [{}] are not supported", c.where(), fmt::join(pads, ","));
  return pads;
}

// (top, left, bottom, right) pads as Caffe's symmetric (pad_h, pad_w), or an error.
std::pair<int64_t, int64_t> symmetric_pads(const NodeCtx& c, const Shape& in, const std::vector<int64_t>& k,
                                           const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  const std::vector<int64_t> pads = window_pads(c, in, k, s, d);
  if (pads[0] != pads[2] || pads[1] != pads[3])
    input_error("{}: asymmetric pads [{}] (top, left, bottom, right) are not supported; Caffe's layers pad both "
                "sides alike",
                c.where(), fmt::join(pads, ","));
  return {pads[0], pads[1]};
}

std::vector<int64_t> pair_attr(const NodeCtx& c, const char* name, std::vector<int64_t> def) {
  auto v = c.attr_ints(name, def);
  if (v.size() != 2) input_error("{}: {} has {} values; 2 expected for a 2-d window", c.where(), name, v.size());
  for (int64_t x : v)
    if (x <= 0) input_error("{}: {} [{}] must be positive", c.where(), name, fmt::join(v, ","));
  return v;
}

Tensor vector_blob(const NodeCtx& c, const Const& k, int64_t n, const char* what, float mul = 1.f) {
  if (k.integer || (k.numel() != n && k.numel() != 1))
    input_error("{}: {} has shape [{}]; {} float values expected", c.where(), what, fmt::join(k.shape, ","), n);
  Tensor t(Shape{n});
  for (int64_t j = 0; j < n; ++j) t.f32()[j] = mul * static_cast<float>(k.at(k.numel() == 1 ? 0 : j));
  return t;
}

// A Convolution or Deconvolution layer's convolution_param, per-axis fields as given.
proto::LayerParameter& conv_layer(NodeCtx& c, const char* type, const std::string& bottom, int64_t outputs, bool bias,
                                  const std::vector<int64_t>& k, const std::vector<int64_t>& s,
                                  const std::vector<int64_t>& pad, const std::vector<int64_t>& d, int64_t group) {
  auto& l = c.add_layer(type, {bottom}, c.out_name(0));
  auto* p = l.mutable_convolution_param();
  p->set_num_output(static_cast<uint32_t>(outputs));
  p->set_bias_term(bias);
  p->set_kernel_h(static_cast<uint32_t>(k[0]));
  p->set_kernel_w(static_cast<uint32_t>(k[1]));
  p->set_stride_h(static_cast<uint32_t>(s[0]));
  p->set_stride_w(static_cast<uint32_t>(s[1]));
  p->set_pad_h(static_cast<uint32_t>(pad[0]));
  p->set_pad_w(static_cast<uint32_t>(pad[1]));
  if (d[0] != 1 || d[1] != 1) {
    p->add_dilation(static_cast<uint32_t>(d[0]));
    p->add_dilation(static_cast<uint32_t>(d[1]));
  }
  if (group != 1) p->set_group(static_cast<uint32_t>(group));
  return l;
}

void conv(NodeCtx& c) {
  const Val& x = c.in_padded(0);
  need_rank(c, x.shape, 4, "the input");
  const Const& w = c.const_in(1);
  if (w.integer || w.shape.size() != 4)
    input_error("{}: weights of shape [{}]; 2-d convolution weights (M, C/group, kH, kW) expected", c.where(),
                fmt::join(w.shape, ","));
  const int64_t group = c.attr_int("group", 1), m = w.shape[0];
  if (group <= 0 || m % group != 0 || x.shape[1] != w.shape[1] * group)
    input_error("{}: {} input channels, weights [{}] and group {} do not fit together", c.where(), x.shape[1],
                fmt::join(w.shape, ","), group);
  auto k = pair_attr(c, "kernel_shape", {w.shape[2], w.shape[3]});
  if (k[0] != w.shape[2] || k[1] != w.shape[3])
    input_error("{}: kernel_shape [{}] differs from the weights' [{}]", c.where(), fmt::join(k, ","),
                fmt::join(w.shape, ","));
  auto s = pair_attr(c, "strides", {1, 1}), d = pair_attr(c, "dilations", {1, 1});
  auto [ph, pw] = symmetric_pads(c, x.shape, k, s, d);
  const int64_t oh = (x.shape[2] + 2 * ph - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  const int64_t ow = (x.shape[3] + 2 * pw - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  const bool bias = c.has_input(2);
  // A Pad before it joins its own.
  auto& l = conv_layer(c, "Convolution", x.blob, m, bias, k, s, {ph + x.pad_h, pw + x.pad_w}, d, group);
  c.add_param(l, w.f);  // ONNX's (M, C/group, kH, kW) is Caffe's layout
  if (bias) c.add_param(l, vector_blob(c, c.const_in(2), m, "the bias"));
  c.set_output(0, {x.shape[0], m, oh, ow});
}

// ConvTranspose's weights (C, M/group, kH, kW) are Deconvolution's layout.
void conv_transpose(NodeCtx& c) {
  const Val& x = c.in(0);
  need_rank(c, x.shape, 4, "the input");
  const Const& w = c.const_in(1);
  if (w.integer || w.shape.size() != 4)
    input_error("{}: weights of shape [{}]; 2-d weights (C, M/group, kH, kW) expected", c.where(), fmt::join(w.shape, ","));
  const int64_t group = c.attr_int("group", 1);
  if (group <= 0 || w.shape[0] != x.shape[1] || x.shape[1] % group != 0)
    input_error("{}: {} input channels, weights [{}] and group {} do not fit together", c.where(), x.shape[1],
                fmt::join(w.shape, ","), group);
  const int64_t m = w.shape[1] * group;
  auto k = pair_attr(c, "kernel_shape", {w.shape[2], w.shape[3]});
  if (k[0] != w.shape[2] || k[1] != w.shape[3])
    input_error("{}: kernel_shape [{}] differs from the weights' [{}]", c.where(), fmt::join(k, ","),
                fmt::join(w.shape, ","));
  auto s = pair_attr(c, "strides", {1, 1}), d = pair_attr(c, "dilations", {1, 1});
  for (int64_t op : c.attr_ints("output_padding", {0, 0}))
    if (op != 0) input_error("{}: output_padding is not supported (Deconvolution's output has no extra rows)", c.where());
  if (c.attr("output_shape") || c.attr_string("auto_pad", "NOTSET") != "NOTSET")
    input_error("{}: output_shape and auto_pad are not supported; give pads", c.where());
  auto [ph, pw] = symmetric_pads(c, x.shape, k, s, d);
  const int64_t oh = (x.shape[2] - 1) * s[0] - 2 * ph + d[0] * (k[0] - 1) + 1;
  const int64_t ow = (x.shape[3] - 1) * s[1] - 2 * pw + d[1] * (k[1] - 1) + 1;
  if (oh <= 0 || ow <= 0) input_error("{}: the pads leave an empty output", c.where());
  const bool bias = c.has_input(2);
  auto& l = conv_layer(c, "Deconvolution", x.blob, m, bias, k, s, {ph, pw}, d, group);
  c.add_param(l, w.f);
  if (bias) c.add_param(l, vector_blob(c, c.const_in(2), m, "the bias"));
  c.set_output(0, {x.shape[0], m, oh, ow});
}

// Both divide alpha by the window size.
void lrn(NodeCtx& c) {
  const Val& x = c.in(0);
  need_rank(c, x.shape, 4, "the input");
  const int64_t size = c.attr_int("size", 0);
  if (size <= 0 || size % 2 == 0) input_error("{}: size {} must be odd and positive for Caffe's LRN", c.where(), size);
  auto& l = c.add_layer("LRN", {x.blob}, c.out_name(0));
  auto* p = l.mutable_lrn_param();
  p->set_local_size(static_cast<uint32_t>(size));
  p->set_alpha(c.attr_float("alpha", 1e-4f));
  p->set_beta(c.attr_float("beta", 0.75f));
  p->set_k(c.attr_float("bias", 1.f));
  c.set_output(0, x.shape);
}

// (rows, cols) weights -> InnerProduct's (out, in), scaled.
Tensor dense_weights(const Const& b, bool transposed, float alpha) {
  const int64_t r = b.shape[0], k = b.shape[1];
  Tensor t(transposed ? Shape{r, k} : Shape{k, r});
  const float* src = b.f.f32();
  float* dst = t.f32();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < k; ++j) {
      if (transposed) dst[i * k + j] = alpha * src[i * k + j];
      else dst[j * r + i] = alpha * src[i * k + j];
    }
  return t;
}

void inner_product(NodeCtx& c, const Val& a, int axis, Tensor w, const Const* bias, float beta) {
  const int64_t n = w.dim(0);
  auto& l = c.add_layer("InnerProduct", {a.blob}, c.out_name(0));
  auto* p = l.mutable_inner_product_param();
  p->set_num_output(static_cast<uint32_t>(n));
  p->set_bias_term(bias != nullptr);
  p->set_axis(axis);
  c.add_param(l, std::move(w));
  if (bias) c.add_param(l, vector_blob(c, *bias, n, "C (the bias)", beta));
  Shape out(a.shape.begin(), a.shape.begin() + axis);
  out.push_back(n);
  c.set_output(0, out);
}

void gemm(NodeCtx& c) {
  const Val& a = c.in(0);
  need_rank(c, a.shape, 2, "A");
  if (a.constant) input_error("{}: A is a constant; only B and C may be", c.where());
  if (c.attr_int("transA", 0)) input_error("{}: transA=1 is not supported", c.where());
  const Const& b = c.const_in(1);
  const bool tb = c.attr_int("transB", 0) != 0;
  if (b.integer || b.shape.size() != 2) input_error("{}: B must be a 2-d float constant", c.where());
  const int64_t k = tb ? b.shape[1] : b.shape[0];
  if (k != a.shape[1])
    input_error("{}: A [{}] and B [{}] (transB={}) do not multiply", c.where(), fmt::join(a.shape, ","),
                fmt::join(b.shape, ","), tb ? 1 : 0);
  const Const* bias = c.has_input(2) ? &c.const_in(2) : nullptr;
  const int64_t n = tb ? b.shape[0] : b.shape[1];
  if (bias && !(bias->numel() == 1 || (bias->numel() == n && bias->shape.back() == n)))
    input_error("{}: C of shape [{}] is not a bias of {} values", c.where(), fmt::join(bias->shape, ","), n);
  inner_product(c, a, 1, dense_weights(b, tb, c.attr_float("alpha", 1.f)), bias, c.attr_float("beta", 1.f));
}

// A product of two computed tensors (attention's Q K^T): BatchMatMul, whose leading axes
// broadcast as ONNX's (NumPy's) matmul does.
void batch_matmul(NodeCtx& c, const Val& a, const Val& b) {
  if (b.constant) input_error("{}: B must be a 2-d constant or a computed tensor (it is a constant [{}])", c.where(),
                              fmt::join(b.shape, ","));
  if (b.shape.size() < 2) input_error("{}: B must have rank 2 or more (it is [{}])", c.where(), fmt::join(b.shape, ","));
  if (b.shape[b.shape.size() - 2] != a.shape.back())
    input_error("{}: A [{}] and B [{}] do not multiply", c.where(), fmt::join(a.shape, ","), fmt::join(b.shape, ","));
  Shape out = broadcast_shape(c, Shape(a.shape.begin(), a.shape.end() - 2), Shape(b.shape.begin(), b.shape.end() - 2));
  out.push_back(a.shape[a.shape.size() - 2]);
  out.push_back(b.shape.back());
  c.add_layer("BatchMatMul", {a.blob, b.blob}, c.out_name(0));
  c.set_output(0, out);
}

void matmul(NodeCtx& c) {
  const Val& a = c.in(0);
  if (a.constant || a.shape.size() < 2) input_error("{}: A must be a computed tensor of rank 2 or more", c.where());
  if (!c.in(1).constant || c.in(1).shape.size() != 2) return batch_matmul(c, a, c.in(1));
  const Const& b = c.const_in(1);
  if (b.integer || b.shape.size() != 2 || b.shape[0] != a.shape.back())
    input_error("{}: B must be a 2-d float constant of {} rows (it is [{}])", c.where(), a.shape.back(),
                fmt::join(b.shape, ","));
  inner_product(c, a, static_cast<int>(a.shape.size()) - 1, dense_weights(b, false, 1.f), nullptr, 1.f);
}

// Scale or bias of a LayerNormalization as a blob of the normalised block's shape (ONNX
// lets them broadcast to it: one value, or the block's own count).
Tensor block_blob(const NodeCtx& c, const Const& k, const Shape& block, const char* what) {
  const int64_t n = shape_numel(block);
  if (k.integer || (k.numel() != n && k.numel() != 1))
    input_error("{}: {} has shape [{}]; [{}] expected", c.where(), what, fmt::join(k.shape, ","), fmt::join(block, ","));
  Tensor t(block);
  for (int64_t j = 0; j < n; ++j) t.f32()[j] = static_cast<float>(k.at(k.numel() == 1 ? 0 : j));
  return t;
}

// LayerNormalization (opset 17): LayerNorm over the axes from `axis` on.
void layer_norm(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.constant) input_error("{}: the input is a constant; only computed tensors are supported", c.where());
  if (c.has_output(1) || c.has_output(2))
    input_error("{}: the Mean and InvStdDev outputs are not supported", c.where());
  const int axis = norm_axis(c, c.attr_int("axis", -1), x.shape.size());
  const Shape block(x.shape.begin() + axis, x.shape.end());
  const bool bias = c.has_input(2);
  auto& l = c.add_layer("LayerNorm", {x.blob}, c.out_name(0));
  auto* p = l.mutable_layer_norm_param();
  p->set_axis(axis);
  p->set_eps(c.attr_float("epsilon", 1e-5f));
  p->set_bias_term(bias);
  c.add_param(l, block_blob(c, c.const_in(1), block, "the scale"));
  if (bias) c.add_param(l, block_blob(c, c.const_in(2), block, "the bias"));
  c.set_output(0, x.shape);
}

void batch_norm(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.shape.size() < 2) input_error("{}: the input must have a channel axis", c.where());
  if (c.attr_int("training_mode", 0)) input_error("{}: training_mode=1 is not supported", c.where());
  for (int o = 1; o < c.num_outputs(); ++o)
    if (c.has_output(o)) input_error("{}: running-statistics outputs are not supported", c.where());
  const int64_t ch = x.shape[1];
  const std::string mid = c.out_name(0) + "#bn";
  auto& bn = c.add_layer("BatchNorm", {x.blob}, mid);
  bn.mutable_batch_norm_param()->set_use_global_stats(true);
  bn.mutable_batch_norm_param()->set_eps(c.attr_float("epsilon", 1e-5f));
  c.add_param(bn, vector_blob(c, c.const_in(3), ch, "the mean"));
  c.add_param(bn, vector_blob(c, c.const_in(4), ch, "the variance"));
  Tensor factor(Shape{1});
  factor.fill(1.f);  // Caffe's statistics are sums divided by this factor
  c.add_param(bn, std::move(factor));
  auto& sc = c.add_layer("Scale", {mid}, c.out_name(0), "#scale");
  sc.mutable_scale_param()->set_axis(1);
  sc.mutable_scale_param()->set_bias_term(true);
  c.add_param(sc, vector_blob(c, c.const_in(1), ch, "the scale"));
  c.add_param(sc, vector_blob(c, c.const_in(2), ch, "the bias"));
  c.set_output(0, x.shape);
}

// Output extent: Caffe's rounding, which must agree with ONNX's (and PyTorch's).
// `in` is the extent ONNX sees (after a pending Pad of `pre`), `p` the node's own pads.
int64_t pooled(const NodeCtx& c, int64_t in, int64_t k, int64_t s, int64_t p, int64_t pre, bool ceil_mode) {
  const int64_t span = in + 2 * p - k;
  if (span < 0) input_error("{}: the window ({}) is larger than the padded input ({})", c.where(), k, in + 2 * p);
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  int64_t onnx_o = o;
  if (ceil_mode && (o - 1) * s >= in + p) --onnx_o;  // the last window starts in the input or its left pad
  // Caffe sees the unpadded input with pads p + pre, and clips only with padding.
  if (p + pre > 0 && (o - 1) * s >= (in - 2 * pre) + (p + pre)) --o;
  if (o != onnx_o)
    input_error("{}: ceil_mode with this window leaves a last window Caffe's pooling keeps; not supported", c.where());
  return o;
}

// ONNX's output extent for a window over `in` with start and end pads `pb`, `pe`.
int64_t onnx_pooled(const NodeCtx& c, int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, bool ceil_mode) {
  const int64_t span = in + pb + pe - k;
  if (span < 0) input_error("{}: the window ({}) is larger than the padded input ({})", c.where(), k, in + pb + pe);
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pb) --o;  // the last window starts in the input or its left pad
  return o;
}

// Caffe's output extent with pad `p` on both sides, in ceil or floor mode.
int64_t caffe_pooled(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const int64_t span = in + 2 * p - k;
  if (span < 0) return -1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && p > 0 && (o - 1) * s >= in + p) --o;
  return o;
}

// Max pooling's windows start at i * stride - start pad in both formats, and what pads the
// end is never the maximum: any pads, symmetric or not (TensorFlow's SAME), are Caffe's
// pad = start pad with the rounding that gives ONNX's number of windows.
void max_pool(NodeCtx& c, const Val& x, const std::vector<int64_t>& k, const std::vector<int64_t>& s,
              const std::vector<int64_t>& pads) {
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  Shape out{x.shape[0], x.shape[1], 0, 0};
  bool floor_fits = true, ceil_fits = true;
  for (int a = 0; a < 2; ++a) {
    const int64_t in = x.shape[2 + a], pb = pads[a], pe = pads[2 + a];
    if (pb >= k[a] || pe >= k[a]) input_error("{}: pads must be smaller than the window", c.where());
    out[2 + a] = onnx_pooled(c, in, k[a], s[a], pb, pe, ceil_mode);
    floor_fits = floor_fits && caffe_pooled(in, k[a], s[a], pb, false) == out[2 + a];
    ceil_fits = ceil_fits && caffe_pooled(in, k[a], s[a], pb, true) == out[2 + a];
  }
  if (!floor_fits && !ceil_fits)
    input_error("{}: pads [{}] with ceil_mode={} give windows Caffe's pooling does not (the end pads reach past a "
                "whole stride)",
                c.where(), fmt::join(pads, ","), ceil_mode ? 1 : 0);
  auto& l = c.add_layer("Pooling", {x.blob}, c.out_name(0));
  auto* p = l.mutable_pooling_param();
  p->set_pool(proto::PoolingParameter::MAX);
  p->set_kernel_h(static_cast<uint32_t>(k[0]));
  p->set_kernel_w(static_cast<uint32_t>(k[1]));
  p->set_stride_h(static_cast<uint32_t>(s[0]));
  p->set_stride_w(static_cast<uint32_t>(s[1]));
  p->set_pad_h(static_cast<uint32_t>(pads[0]));
  p->set_pad_w(static_cast<uint32_t>(pads[1]));
  p->set_round_mode(floor_fits ? proto::PoolingParameter::FLOOR : proto::PoolingParameter::CEIL);
  c.set_output(0, out);
}

void pool(NodeCtx& c, bool max) {
  const Val& x = max ? c.in(0) : c.in_padded(0);  // zero padding is not max pooling's
  need_rank(c, x.shape, 4, "the input");
  if (c.has_output(1)) input_error("{}: the Indices output is not supported", c.where());
  auto k = pair_attr(c, "kernel_shape", {});
  auto s = pair_attr(c, "strides", {1, 1}), d = pair_attr(c, "dilations", {1, 1});
  if (d[0] != 1 || d[1] != 1) input_error("{}: dilated pooling is not supported", c.where());
  if (max) {
    max_pool(c, x, k, s, window_pads(c, x.shape, k, s, d));
    return;
  }
  auto [ph, pw] = symmetric_pads(c, x.shape, k, s, d);
  const bool ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  // Caffe's average counts the padding in its divisor (count_include_pad=1).
  if (!max && (ph || pw) && !c.attr_int("count_include_pad", 0))
    input_error("{}: count_include_pad=0 with pads is not supported (Caffe's average counts the padding)",
                c.where());
  // A pending Pad's zeros count in Caffe's divisor, as they do in ONNX's (they are input there).
  if (ph + x.pad_h >= k[0] || pw + x.pad_w >= k[1])
    input_error("{}: pads must be smaller than the window", c.where());
  auto& l = c.add_layer("Pooling", {x.blob}, c.out_name(0));
  auto* p = l.mutable_pooling_param();
  p->set_pool(max ? proto::PoolingParameter::MAX : proto::PoolingParameter::AVE);
  p->set_kernel_h(static_cast<uint32_t>(k[0]));
  p->set_kernel_w(static_cast<uint32_t>(k[1]));
  p->set_stride_h(static_cast<uint32_t>(s[0]));
  p->set_stride_w(static_cast<uint32_t>(s[1]));
  p->set_pad_h(static_cast<uint32_t>(ph + x.pad_h));
  p->set_pad_w(static_cast<uint32_t>(pw + x.pad_w));
  p->set_round_mode(ceil_mode ? proto::PoolingParameter::CEIL : proto::PoolingParameter::FLOOR);
  c.set_output(0, {x.shape[0], x.shape[1], pooled(c, x.shape[2], k[0], s[0], ph, x.pad_h, ceil_mode),
                   pooled(c, x.shape[3], k[1], s[1], pw, x.pad_w, ceil_mode)});
}

void global_pool(NodeCtx& c, bool max) {
  const Val& x = c.in(0);
  need_rank(c, x.shape, 4, "the input");
  auto& l = c.add_layer("Pooling", {x.blob}, c.out_name(0));
  l.mutable_pooling_param()->set_pool(max ? proto::PoolingParameter::MAX : proto::PoolingParameter::AVE);
  l.mutable_pooling_param()->set_global_pooling(true);
  c.set_output(0, {x.shape[0], x.shape[1], 1, 1});
}

// The mean over other axes: Reduction (MEAN over the trailing axes) after a Permute that
// moves the reduced axes last (when they are not), and a Reshape that puts them back as 1s
// with keepdims.
void reduce_mean_axes(NodeCtx& c, const Val& x, const std::vector<bool>& reduced, bool keep) {
  const size_t r = x.shape.size();
  std::vector<uint32_t> order;
  Shape kept, keep_shape;
  for (size_t a = 0; a < r; ++a)
    if (!reduced[a]) {
      order.push_back(static_cast<uint32_t>(a));
      kept.push_back(x.shape[a]);
    }
  const auto first_reduced = static_cast<int32_t>(order.size());
  for (size_t a = 0; a < r; ++a) {
    if (reduced[a]) order.push_back(static_cast<uint32_t>(a));
    keep_shape.push_back(reduced[a] ? 1 : x.shape[a]);
  }
  bool trailing = true;
  for (size_t a = 0; a < r; ++a) trailing = trailing && order[a] == a;
  std::string in = x.blob;
  if (!trailing) {
    in = c.out_name(0) + "#permute";
    auto& p = c.add_layer("Permute", {x.blob}, in, "#permute");
    for (uint32_t o : order) p.mutable_permute_param()->add_order(o);
  }
  const std::string mean = keep ? c.out_name(0) + "#mean" : c.out_name(0);
  auto& l = c.add_layer("Reduction", {in}, mean, keep ? "#mean" : "");
  l.mutable_reduction_param()->set_operation(proto::ReductionParameter::MEAN);
  l.mutable_reduction_param()->set_axis(first_reduced);
  if (keep) {
    auto& s = c.add_layer("Reshape", {mean}, c.out_name(0), "#keepdims");
    for (size_t a = 0; a < r; ++a)
      s.mutable_reshape_param()->mutable_shape()->add_dim(a == 0 && !reduced[0] ? 0 : keep_shape[a]);
  }
  c.set_output(0, keep ? keep_shape : kept);
}

// ReduceMean over H and W (torch's x.mean((2, 3))) is global average pooling, followed by a
// Reshape when the reduced axes are dropped; over other axes, see reduce_mean_axes.
void reduce_mean(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.constant) input_error("{}: the mean of a constant is not supported", c.where());
  // Opset 18 moved `axes` from an attribute to the second input.
  std::vector<int64_t> axes = c.opset() >= 18 ? (c.has_input(1) ? c.const_in(1).ints(c.where()) : std::vector<int64_t>{})
                                              : c.attr_ints("axes", {});
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (axes.empty() && c.attr_int("noop_with_empty_axes", 0)) return c.alias(0, x);
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (auto& a : axes) {
    a = norm_axis(c, a, x.shape.size());
    if (reduced[a]) input_error("{}: axis {} is given twice", c.where(), a);
    reduced[a] = true;
  }
  std::sort(axes.begin(), axes.end());
  if (x.shape.size() != 4 || axes != std::vector<int64_t>{2, 3}) return reduce_mean_axes(c, x, reduced, keep);
  const std::string pooled_blob = keep ? c.out_name(0) : c.out_name(0) + "#pool";
  auto& l = c.add_layer("Pooling", {x.blob}, pooled_blob);
  l.mutable_pooling_param()->set_pool(proto::PoolingParameter::AVE);
  l.mutable_pooling_param()->set_global_pooling(true);
  if (!keep) {
    auto& r = c.add_layer("Flatten", {pooled_blob}, c.out_name(0), "#flatten");
    r.mutable_flatten_param()->set_axis(1);
  }
  c.set_output(0, keep ? Shape{x.shape[0], x.shape[1], 1, 1} : Shape{x.shape[0], x.shape[1]});
}

}  // namespace

BKS_ONNX_OP("ReduceMean", reduce_mean);
BKS_ONNX_OP("Conv", conv);
BKS_ONNX_OP("ConvTranspose", conv_transpose);
BKS_ONNX_OP("LRN", lrn);
BKS_ONNX_OP("Gemm", gemm);
BKS_ONNX_OP("MatMul", matmul);
BKS_ONNX_OP("BatchNormalization", batch_norm);
BKS_ONNX_OP("LayerNormalization", layer_norm);
BKS_ONNX_OP("MaxPool", [](NodeCtx& c) { pool(c, true); });
BKS_ONNX_OP("AveragePool", [](NodeCtx& c) { pool(c, false); });
BKS_ONNX_OP("GlobalAveragePool", [](NodeCtx& c) { global_pool(c, false); });
BKS_ONNX_OP("GlobalMaxPool", [](NodeCtx& c) { global_pool(c, true); });

}  // namespace bks::onnx_import
