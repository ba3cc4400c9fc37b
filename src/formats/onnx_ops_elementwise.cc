// Activations, Softmax and the arithmetic nodes. Arithmetic with a constant becomes Power
// (a scalar), Bias or Scale (a per-channel or trailing block); between two computed tensors
// of one shape it becomes Eltwise, of shapes that broadcast (or a division) Arithmetic;
// between constants it is computed here.
#include <cfloat>
#include <cmath>
#include <functional>

#include "formats/onnx_ops.h"

namespace bks::onnx_import {
namespace {

void unary(NodeCtx& c, const char* type) {
  const Val& x = c.in(0);
  if (x.constant) input_error("{}: the input is a constant; only computed tensors are supported", c.where());
  c.add_layer(type, {x.blob}, c.out_name(0));
  c.set_output(0, x.shape);
}

// Gelu (opset 20): the exact form, or approximate="tanh".
void gelu(NodeCtx& c) {
  const Val& x = c.in(0);
  const std::string approx = c.attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    input_error("{}: approximate '{}' is not an ONNX value (none, tanh)", c.where(), approx);
  auto& l = c.add_layer("GELU", {x.blob}, c.out_name(0));
  l.mutable_gelu_param()->set_approximate(approx == "tanh" ? proto::GELUParameter::TANH : proto::GELUParameter::NONE);
  c.set_output(0, x.shape);
}

// sqrt(x) is Power's x ^ 0.5.
void sqrt_node(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.constant) input_error("{}: the input is a constant; only computed tensors are supported", c.where());
  c.add_layer("Power", {x.blob}, c.out_name(0)).mutable_power_param()->set_power(0.5f);
  c.set_output(0, x.shape);
}

void leaky_relu(NodeCtx& c) {
  const Val& x = c.in(0);
  auto& l = c.add_layer("ReLU", {x.blob}, c.out_name(0));
  l.mutable_relu_param()->set_negative_slope(c.attr_float("alpha", 0.01f));
  c.set_output(0, x.shape);
}

// Clip 0..6 is MobileNet's ReLU6, 0..inf a ReLU, anything else Caffe's Clip.
void clip(NodeCtx& c) {
  const Val& x = c.in(0);
  auto bound = [&](int i, double def) {
    if (!c.has_input(i)) return def;
    const Const& k = c.const_in(i);
    if (k.numel() != 1) input_error("{}: input {} must be a scalar", c.where(), i);
    return k.at(0);
  };
  const double lo = bound(1, -INFINITY), hi = bound(2, INFINITY);
  if (lo == 0 && hi == 6) {
    c.add_layer("ReLU6", {x.blob}, c.out_name(0));
  } else if (lo == 0 && std::isinf(hi)) {
    c.add_layer("ReLU", {x.blob}, c.out_name(0));
  } else {
    auto& l = c.add_layer("Clip", {x.blob}, c.out_name(0));
    l.mutable_clip_param()->set_min(std::isinf(lo) ? -FLT_MAX : static_cast<float>(lo));
    l.mutable_clip_param()->set_max(std::isinf(hi) ? FLT_MAX : static_cast<float>(hi));
  }
  c.set_output(0, x.shape);
}

void elu(NodeCtx& c) {
  const Val& x = c.in(0);
  auto& l = c.add_layer("ELU", {x.blob}, c.out_name(0));
  l.mutable_elu_param()->set_alpha(c.attr_float("alpha", 1.f));
  c.set_output(0, x.shape);
}

float scalar_in(const NodeCtx& c, int i, const char* what) {
  const Const& k = c.const_in(i);
  if (k.numel() != 1 || k.integer) input_error("{}: {} must be a float scalar constant", c.where(), what);
  return static_cast<float>(k.at(0));
}

// x ^ p for a constant scalar p: Caffe's Power.
void pow_node(NodeCtx& c) {
  const Val& x = c.in(0);
  auto& l = c.add_layer("Power", {x.blob}, c.out_name(0));
  l.mutable_power_param()->set_power(scalar_in(c, 1, "the exponent"));
  c.set_output(0, x.shape);
}

// max(0, min(1, alpha * x + beta)): a Power, then a Clip.
std::string hard_sigmoid_of(NodeCtx& c, const Val& x, float alpha, float beta, const std::string& top) {
  const std::string mid = c.out_name(0) + "#affine";
  auto& p = c.add_layer("Power", {x.blob}, mid, "#affine");
  p.mutable_power_param()->set_scale(alpha);
  p.mutable_power_param()->set_shift(beta);
  auto& l = c.add_layer("Clip", {mid}, top, "#clip");
  l.mutable_clip_param()->set_min(0.f);
  l.mutable_clip_param()->set_max(1.f);
  return top;
}

void hard_sigmoid(NodeCtx& c) {
  const Val& x = c.in(0);
  hard_sigmoid_of(c, x, c.attr_float("alpha", 0.2f), c.attr_float("beta", 0.5f), c.out_name(0));
  c.set_output(0, x.shape);
}

// x * HardSigmoid(x) with alpha 1/6, beta 1/2 (MobileNet v3's).
void hard_swish(NodeCtx& c) {
  const Val& x = c.in(0);
  const std::string gate = hard_sigmoid_of(c, x, 1.f / 6.f, 0.5f, c.out_name(0) + "#gate");
  auto& l = c.add_layer("Eltwise", {x.blob, gate}, c.out_name(0));
  l.mutable_eltwise_param()->set_operation(proto::EltwiseParameter::PROD);
  c.set_output(0, x.shape);
}

// Max of computed tensors of one shape: Eltwise MAX.
void max_node(NodeCtx& c) {
  std::vector<std::string> bottoms;
  const Shape shape = c.in(0).shape;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Val& v = c.in(i);
    if (v.constant || v.shape != shape)
      input_error("{}: Max of constants or of tensors of different shapes is not supported", c.where());
    bottoms.push_back(v.blob);
  }
  if (bottoms.size() == 1) {
    c.alias(0, c.in(0));
    return;
  }
  auto& l = c.add_layer("Eltwise", bottoms, c.out_name(0));
  l.mutable_eltwise_param()->set_operation(proto::EltwiseParameter::MAX);
  c.set_output(0, shape);
}

void softmax(NodeCtx& c) {
  const Val& x = c.in(0);
  const int axis = norm_axis(c, c.attr_int("axis", c.opset() < 13 ? 1 : -1), x.shape.size());
  // Before opset 13 Softmax normalises over all axes from `axis` on; the same as Caffe's
  // single axis only when the axes after it are 1.
  if (c.opset() < 13 && shape_count(x.shape, axis + 1, static_cast<int>(x.shape.size())) != 1)
    input_error("{}: opset {} Softmax over the flattened axes {}.. of [{}] is not supported", c.where(), c.opset(),
                axis, fmt::join(x.shape, ","));
  auto& l = c.add_layer("Softmax", {x.blob}, c.out_name(0));
  l.mutable_softmax_param()->set_axis(axis);
  c.set_output(0, x.shape);
}

enum class Arith { add, sub, mul, div };

Const fold(const NodeCtx& c, const Const& a, const Const& b, Arith op) {
  if (a.shape != b.shape && a.numel() != 1 && b.numel() != 1)
    input_error("{}: constants of shapes [{}] and [{}]: broadcasting them is not supported", c.where(),
                fmt::join(a.shape, ","), fmt::join(b.shape, ","));
  const Shape shape = a.numel() == 1 && b.numel() != 1 ? b.shape : a.shape;
  const int64_t n = shape_numel(shape);
  const bool integer = a.integer && b.integer;
  Const r = integer ? int_const(shape, std::vector<int64_t>(n)) : float_const(shape);
  for (int64_t k = 0; k < n; ++k) {
    const double x = a.at(a.numel() == 1 ? 0 : k), y = b.at(b.numel() == 1 ? 0 : k);
    if (integer) {
      const auto xi = static_cast<int64_t>(x), yi = static_cast<int64_t>(y);
      if (op == Arith::div && yi == 0) input_error("{}: integer division by zero", c.where());
      r.i[k] = op == Arith::add ? xi + yi : op == Arith::sub ? xi - yi : op == Arith::mul ? xi * yi : xi / yi;
    } else {
      r.f.f32()[k] = static_cast<float>(op == Arith::add ? x + y : op == Arith::sub ? x - y : op == Arith::mul ? x * y : x / y);
    }
  }
  return r;
}

// The axes [first, last) of x that a constant of shape k spans when broadcast to x: those
// from its first to its last axis that is not 1, which must equal x's; false otherwise.
bool block_axes(const Shape& x, Shape k, int& first, int& last) {
  if (k.size() > x.size()) return false;
  k.insert(k.begin(), x.size() - k.size(), 1);
  first = -1;
  for (size_t a = 0; a < x.size(); ++a)
    if (k[a] != 1) {
      if (first < 0) first = static_cast<int>(a);
      last = static_cast<int>(a) + 1;
    }
  if (first < 0) return false;
  for (int a = first; a < last; ++a)
    if (k[a] != x[a]) return false;
  return true;
}

// Two computed tensors of different shapes (or a division): Arithmetic, which broadcasts
// as ONNX does.
void broadcast_arith(NodeCtx& c, const Val& a, const Val& b, Arith op) {
  const Shape out = broadcast_shape(c, a.shape, b.shape);
  auto& l = c.add_layer("Arithmetic", {a.blob, b.blob}, c.out_name(0));
  l.mutable_arithmetic_param()->set_operation(op == Arith::add   ? proto::ArithmeticParameter::ADD
                                              : op == Arith::sub ? proto::ArithmeticParameter::SUB
                                              : op == Arith::mul ? proto::ArithmeticParameter::MUL
                                                                 : proto::ArithmeticParameter::DIV);
  c.set_output(0, out);
}

void arith(NodeCtx& c, Arith op) {
  const Val& a = c.in(0);
  const Val& b = c.in(1);
  if (a.constant && b.constant) return c.set_const(0, fold(c, *a.constant, *b.constant, op));
  if (!a.constant && !b.constant) {
    if (a.shape != b.shape || op == Arith::div) return broadcast_arith(c, a, b, op);
    auto& l = c.add_layer("Eltwise", {a.blob, b.blob}, c.out_name(0));
    auto* p = l.mutable_eltwise_param();
    p->set_operation(op == Arith::mul ? proto::EltwiseParameter::PROD : proto::EltwiseParameter::SUM);
    if (op == Arith::sub) {
      p->add_coeff(1.f);
      p->add_coeff(-1.f);
    }
    c.set_output(0, a.shape);
    return;
  }
  const bool const_first = a.constant != nullptr;
  const Val& x = const_first ? b : a;
  const Const& k = const_first ? *a.constant : *b.constant;
  if (const_first && (op == Arith::sub || op == Arith::div))
    input_error("{}: a constant minus or divided by a computed tensor is not supported", c.where());
  if (k.integer) input_error("{}: an integer constant with a float tensor is not supported", c.where());
  const bool additive = op == Arith::add || op == Arith::sub;
  auto value = [&](int64_t j) {
    const double v = k.at(j);
    return static_cast<float>(op == Arith::sub ? -v : op == Arith::div ? 1.0 / v : v);
  };
  if (k.numel() == 1) {
    auto& l = c.add_layer("Power", {x.blob}, c.out_name(0));
    if (additive) l.mutable_power_param()->set_shift(value(0));
    else l.mutable_power_param()->set_scale(value(0));
    c.set_output(0, x.shape);
    return;
  }
  int first = 0, last = 0;
  if (!block_axes(x.shape, k.shape, first, last))
    input_error("{}: broadcasting the constant [{}] to [{}] is not supported (a scalar, or a block of axes such as "
                "per-channel, is)",
                c.where(), fmt::join(k.shape, ","), fmt::join(x.shape, ","));
  Shape bs(x.shape.begin() + first, x.shape.begin() + last);
  Tensor t(bs);
  for (int64_t j = 0; j < t.numel(); ++j) t.f32()[j] = value(j);
  auto& l = c.add_layer(additive ? "Bias" : "Scale", {x.blob}, c.out_name(0));
  if (additive) {
    l.mutable_bias_param()->set_axis(first);
    l.mutable_bias_param()->set_num_axes(last - first);
  } else {
    l.mutable_scale_param()->set_axis(first);
    l.mutable_scale_param()->set_num_axes(last - first);
    l.mutable_scale_param()->set_bias_term(false);
  }
  c.add_param(l, std::move(t));
  c.set_output(0, x.shape);
}

}  // namespace

BKS_ONNX_OP("Relu", [](NodeCtx& c) { unary(c, "ReLU"); });
BKS_ONNX_OP("Sigmoid", [](NodeCtx& c) { unary(c, "Sigmoid"); });
BKS_ONNX_OP("Tanh", [](NodeCtx& c) { unary(c, "TanH"); });
BKS_ONNX_OP("LeakyRelu", leaky_relu);
BKS_ONNX_OP("Abs", [](NodeCtx& c) { unary(c, "AbsVal"); });
BKS_ONNX_OP("Softplus", [](NodeCtx& c) { unary(c, "BNLL"); });
BKS_ONNX_OP("Elu", elu);
BKS_ONNX_OP("Erf", [](NodeCtx& c) { unary(c, "Erf"); });
BKS_ONNX_OP("Gelu", gelu);
BKS_ONNX_OP("Sqrt", sqrt_node);
BKS_ONNX_OP("Pow", pow_node);
BKS_ONNX_OP("HardSigmoid", hard_sigmoid);
BKS_ONNX_OP("HardSwish", hard_swish);
BKS_ONNX_OP("Max", max_node);
BKS_ONNX_OP("Clip", clip);
BKS_ONNX_OP("Softmax", softmax);
BKS_ONNX_OP("Add", [](NodeCtx& c) { arith(c, Arith::add); });
BKS_ONNX_OP("Sub", [](NodeCtx& c) { arith(c, Arith::sub); });
BKS_ONNX_OP("Mul", [](NodeCtx& c) { arith(c, Arith::mul); });
BKS_ONNX_OP("Div", [](NodeCtx& c) { arith(c, Arith::div); });

}  // namespace bks::onnx_import
