// Erf and GELU (the elementwise family of ops/elementwise.h): what transformers' feed-forward
// blocks apply. GELU is x * Phi(x), Phi the standard normal's CDF, exactly (with erf) or by
// the tanh approximation (ONNX Gelu's approximate="tanh", PyTorch's the same).
#include <cmath>
#include <numbers>

#include "ops/elementwise.h"
#include "ops/vector_math.h"

namespace bks {
namespace {

void no_traits(const Node&, OpTraits&) {}

constexpr double kSqrt2 = std::numbers::sqrt2;
constexpr double kInvSqrtPi = std::numbers::inv_sqrtpi;

struct ErfFn {
  static ErfFn from(const OpContext&) { return {}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, false, true}; }
  float f(float x) const { return erf_vec(x); }
  float grad(float x, float) const { return static_cast<float>(2 * kInvSqrtPi) * exp_vec(-x * x); }
};

constexpr const char* kGeluApproximations[] = {"NONE", "TANH"};

struct GELUAttrs final : AttrsOf<GELUAttrs> {
  enum Approximate { none, tanh };  // GELUParameter's values
  int approximate = none;
  void visit(AttrVisitor& v) override { v.field("approximate", approximate, kGeluApproximations); }
};
void gelu_from_caffe(const proto::LayerParameter& l, GELUAttrs& a, const std::string&) {
  a.approximate = static_cast<int>(l.gelu_param().approximate());
}
void gelu_to_caffe(const GELUAttrs& a, proto::LayerParameter& l) {
  l.mutable_gelu_param()->set_approximate(static_cast<proto::GELUParameter::Approximate>(a.approximate));
}
BKS_REGISTER_ATTRS("GELU", GELUAttrs, gelu_from_caffe, gelu_to_caffe);

// Both forms are computed and one is selected: GCC 12 does not vectorise a loop that
// branches on a field (a bool one not even under a select), and vectorised, both cost less
// than one in scalar code.
struct GELUFn {
  int tanh_form;
  static GELUFn from(const OpContext& c) { return {c.node.attrs.as<GELUAttrs>().approximate == GELUAttrs::tanh}; }
  static constexpr auto add_traits = no_traits;
  ElementwiseFlow flow() const { return {true, false, true}; }

  // sqrt(2 / pi) and the cubic's coefficient of the tanh form.
  static constexpr float kC = static_cast<float>(kSqrt2 * kInvSqrtPi), kA = 0.044715f;
  float f(float x) const {
    const float by_tanh = tanh_vec(kC * (x + kA * x * x * x));
    const float by_erf = erf_vec(x * static_cast<float>(1 / kSqrt2));
    return 0.5f * x * (1.f + (tanh_form ? by_tanh : by_erf));
  }
  // d/dx x Phi(x) = Phi(x) + x phi(x); the tanh form's derivative is its own.
  float grad(float x, float) const {
    const float t = tanh_vec(kC * (x + kA * x * x * x));
    const float by_tanh = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kC * (1.f + 3.f * kA * x * x);
    const float phi = static_cast<float>(kInvSqrtPi / kSqrt2) * exp_vec(-0.5f * x * x);
    const float by_erf = 0.5f * (1.f + erf_vec(x * static_cast<float>(1 / kSqrt2))) + x * phi;
    return tanh_form ? by_tanh : by_erf;
  }
};

}  // namespace

BKS_REGISTER_ELEMENTWISE("Erf", ErfFn);
BKS_REGISTER_ELEMENTWISE("GELU", GELUFn);

}  // namespace bks
