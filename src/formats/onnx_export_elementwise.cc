// ONNX writers for element-wise and data-moving layers: activations, Power, Eltwise,
// Softmax, Concat, Flatten, Reshape, Permute, Split, Dropout.
#include <numeric>

#include "formats/onnx_export_ops.h"

namespace bks::onnx_export {

namespace {

std::string scalar(NodeWriter& w, const std::string& suffix, float v) { return w.initializer(suffix, {v}, {}); }

void write_relu(NodeWriter& w) {
  const float slope = w.attr_float("negative_slope");
  if (slope == 0.f) {
    w.add("Relu", {w.in(0)}, {w.out()});
    return;
  }
  set_attr(w.add("LeakyRelu", {w.in(0)}, {w.out()}), "alpha", slope);
}

template <const char* Op>
void write_unary(NodeWriter& w) {
  w.add(Op, {w.in(0)}, {w.out()});
}
constexpr char kSigmoid[] = "Sigmoid", kTanh[] = "Tanh", kAbs[] = "Abs", kSoftplus[] = "Softplus",
               kIdentity[] = "Identity";

void write_elu(NodeWriter& w) { set_attr(w.add("Elu", {w.in(0)}, {w.out()}), "alpha", w.attr_float("alpha")); }

void write_clip(NodeWriter& w) {
  w.add("Clip", {w.in(0), scalar(w, "min", w.attr_float("min")), scalar(w, "max", w.attr_float("max"))}, {w.out()});
}

void write_relu6(NodeWriter& w) { w.add("Clip", {w.in(0), scalar(w, "min", 0.f), scalar(w, "max", 6.f)}, {w.out()}); }

// y = (shift + scale * x) ^ power, each step written only when it changes x.
void write_power(NodeWriter& w) {
  const float power = w.attr_float("power"), scale = w.attr_float("scale"), shift = w.attr_float("shift");
  std::vector<std::pair<const char*, float>> steps;
  if (scale != 1.f) steps.push_back({"Mul", scale});
  if (shift != 0.f) steps.push_back({"Add", shift});
  if (power != 1.f) steps.push_back({"Pow", power});
  if (steps.empty()) {
    w.add("Identity", {w.in(0)}, {w.out()});
    return;
  }
  std::string x = w.in(0);
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string y = i + 1 == steps.size() ? w.out() : w.temp(steps[i].first);
    w.add(steps[i].first, {x, scalar(w, steps[i].first, steps[i].second)}, {y});
    x = y;
  }
}

void write_eltwise(NodeWriter& w) {
  const std::string op = w.attr_enum("operation");
  const std::vector<float> coeff = w.attr_floats("coeff");
  std::vector<std::string> in;
  for (int i = 0; i < w.num_inputs(); ++i) in.push_back(w.in(i));
  if (op == "MAX") {
    w.add("Max", in, {w.out()});
    return;
  }
  if (op == "SUM")
    for (size_t i = 0; i < coeff.size() && i < in.size(); ++i)
      if (coeff[i] != 1.f) {
        std::string scaled = w.temp("coeff");
        w.add("Mul", {in[i], scalar(w, "coeff", coeff[i])}, {scaled});
        in[i] = scaled;
      }
  // ONNX's Add and Mul take two inputs: a chain.
  const char* binary = op == "SUM" ? "Add" : "Mul";
  std::string acc = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    std::string y = i + 1 == in.size() ? w.out() : w.temp(binary);
    w.add(binary, {acc, in[i]}, {y});
    acc = y;
  }
  if (in.size() == 1) w.add("Identity", {acc}, {w.out()});
}

void write_softmax(NodeWriter& w) { set_attr(w.add("Softmax", {w.in(0)}, {w.out()}), "axis", w.attr_int("axis")); }

void write_concat(NodeWriter& w) {
  std::vector<std::string> in;
  for (int i = 0; i < w.num_inputs(); ++i) in.push_back(w.in(i));
  set_attr(w.add("Concat", in, {w.out()}), "axis", w.attr_int("axis"));
}

// Flatten and Reshape: a Reshape to the output's shape, the first dimension copied (0) when
// it is the input's, so the model still runs at another batch size.
void write_reshape(NodeWriter& w) {
  std::vector<int64_t> shape = w.out_shape(0);
  if (!shape.empty() && !w.in_shape(0).empty() && shape[0] == w.in_shape(0)[0]) shape[0] = 0;
  w.add("Reshape", {w.in(0), w.int64s("shape", shape)}, {w.out()});
}

// Caffe's order lists some axes; the others follow in their order.
void write_permute(NodeWriter& w) {
  const auto rank = static_cast<int64_t>(w.in_shape(0).size());
  std::vector<int64_t> order = w.attr_ints("order");
  std::vector<bool> seen(rank, false);
  for (int64_t a : order) {
    if (a < 0 || a >= rank || seen[a]) w.fail("permute_param.order {} is not a permutation of {} axes", a, rank);
    seen[a] = true;
  }
  for (int64_t a = 0; a < rank; ++a)
    if (!seen[a]) order.push_back(a);
  set_attr(w.add("Transpose", {w.in(0)}, {w.out()}), "perm", order);
}

void write_split(NodeWriter& w) {
  for (size_t i = 0; i < w.node().outputs.size(); ++i) w.add("Identity", {w.in(0)}, {w.out(static_cast<int>(i))});
}

}  // namespace

BKS_ONNX_EXPORT("ReLU", write_relu);
BKS_ONNX_EXPORT("Sigmoid", write_unary<kSigmoid>);
BKS_ONNX_EXPORT("TanH", write_unary<kTanh>);
BKS_ONNX_EXPORT("AbsVal", write_unary<kAbs>);
BKS_ONNX_EXPORT("BNLL", write_unary<kSoftplus>);
BKS_ONNX_EXPORT("Dropout", write_unary<kIdentity>);
BKS_ONNX_EXPORT("ELU", write_elu);
BKS_ONNX_EXPORT("Clip", write_clip);
BKS_ONNX_EXPORT("ReLU6", write_relu6);
BKS_ONNX_EXPORT("Power", write_power);
BKS_ONNX_EXPORT("Eltwise", write_eltwise);
BKS_ONNX_EXPORT("Softmax", write_softmax);
BKS_ONNX_EXPORT("Concat", write_concat);
BKS_ONNX_EXPORT("Flatten", write_reshape);
BKS_ONNX_EXPORT("Reshape", write_reshape);
BKS_ONNX_EXPORT("Permute", write_permute);
BKS_ONNX_EXPORT("Split", write_split);

}  // namespace bks::onnx_export
