// PositionalEncoding (positional_encoding_param): y = x + P[t], t an element's index along
// `axis`, P[t] a vector as wide as x's last axis: a learned (max_length, D) blob, or the
// fixed sinusoids P[t, 2i] = sin(t / 10000^(2i/D)), P[t, 2i+1] = cos(the same). Attention
// is blind to order; this is what tells a transformer where each timestep is.
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kPositionKinds[] = {"LEARNED", "SINUSOIDAL"};

struct PositionalEncodingAttrs final : AttrsOf<PositionalEncodingAttrs> {
  enum Kind { learned, sinusoidal };  // PositionalEncodingParameter.Kind's values
  int kind = learned;
  int64_t max_length = 0;
  int64_t axis = 0;
  FillerSpec weight_filler;
  PositionalEncodingAttrs() {
    weight_filler.type = "gaussian";
    weight_filler.std = 0.02f;
  }
  void visit(AttrVisitor& v) override {
    v.field("kind", kind, kPositionKinds);
    v.field("max_length", max_length);
    v.field("axis", axis);
    v.field("weight_filler", weight_filler);
  }
};
void positional_from_caffe(const proto::LayerParameter& l, PositionalEncodingAttrs& a, const std::string&) {
  const proto::PositionalEncodingParameter& p = l.positional_encoding_param();
  a.kind = static_cast<int>(p.kind());
  a.max_length = p.max_length();
  a.axis = p.axis();
  if (p.has_weight_filler()) a.weight_filler = filler_from_caffe(p.weight_filler());
}
void positional_to_caffe(const PositionalEncodingAttrs& a, proto::LayerParameter& l) {
  proto::PositionalEncodingParameter* p = l.mutable_positional_encoding_param();
  p->set_kind(static_cast<proto::PositionalEncodingParameter::Kind>(a.kind));
  p->set_max_length(static_cast<uint32_t>(a.max_length));
  p->set_axis(static_cast<int32_t>(a.axis));
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
}
BKS_REGISTER_ATTRS("PositionalEncoding", PositionalEncodingAttrs, positional_from_caffe, positional_to_caffe);

// The position axis of a bottom of shape s, checked: not the last (that is the width).
int position_axis(const OpContext& c, const Shape& s) {
  const int64_t a = c.node.attrs.as<PositionalEncodingAttrs>().axis, nd = static_cast<int64_t>(s.size());
  const int64_t axis = a < 0 ? a + nd : a;
  if (axis < 0 || axis >= nd - 1)
    c.fail("positional_encoding_param.axis {} must name an axis before the last (the width) of bottom {}", a,
           shape_str(s));
  return static_cast<int>(axis);
}

class PositionalEncodingDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const PositionalEncodingAttrs& a = c.node.attrs.as<PositionalEncodingAttrs>();
    const int64_t t = in[0][static_cast<size_t>(position_axis(c, in[0]))];
    if (a.kind == PositionalEncodingAttrs::learned && t > a.max_length)
      c.fail("positional_encoding_param.max_length {} is below the bottom's {} positions", a.max_length, t);
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const PositionalEncodingAttrs& a = c.node.attrs.as<PositionalEncodingAttrs>();
    if (a.kind != PositionalEncodingAttrs::learned) return {};
    return {{{a.max_length, in[0].back()}, a.weight_filler, true}};
  }
  // Along axis 0 (or a negative axis, which may be it), where an item sits matters.
  OpTraits traits(const Node& n) const override {
    OpTraits t;
    t.mixes_axis0 = n.attrs.as<PositionalEncodingAttrs>().axis <= 0;
    return t;
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.allows_inplace = true;
    f.backward_reads_input = false;
    return f;
  }
};

class PositionalEncodingKernel final : public Kernel {
 public:
  explicit PositionalEncodingKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<PositionalEncodingAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    const int axis = position_axis(context(), in[0]);
    const int nd = static_cast<int>(in[0].size());
    outer_ = shape_count(in[0], 0, axis);
    t_ = in[0][static_cast<size_t>(axis)];
    mid_ = shape_count(in[0], axis + 1, nd - 1);
    d_ = in[0].back();
    if (a_.kind == PositionalEncodingAttrs::sinusoidal) {
      table_.resize(static_cast<size_t>(t_ * d_));
      for (int64_t t = 0; t < t_; ++t)
        for (int64_t i = 0; i < d_; ++i) {
          const double angle =
              static_cast<double>(t) / std::pow(10000.0, static_cast<double>(i - i % 2) / static_cast<double>(d_));
          table_[static_cast<size_t>(t * d_ + i)] = static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
        }
    }
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* p = a_.kind == PositionalEncodingAttrs::learned ? c.params[0]->f32() : table_.data();
    float* y = c.out[0]->f32();
    const int64_t rows = outer_ * t_ * mid_, d = d_, mid = mid_, t_count = t_;
    parallel_ranges(
        rows,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* pr = p + (r / mid) % t_count * d;
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] + pr[i];
          }
        },
        kSerialBelow / std::max<int64_t>(d, 1));
  }
  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    const int64_t rows = outer_ * t_ * mid_;
    if (a_.kind == PositionalEncodingAttrs::learned && !c.param_grad.empty() && c.param_grad[0]) {
      float* dp = c.param_grad[0]->f32();
      std::memset(dp, 0, static_cast<size_t>(c.param_grad[0]->numel()) * sizeof(float));
      for (int64_t r = 0; r < rows; ++r) {
        float* pr = dp + (r / mid_) % t_ * d_;
        const float* g = dy + r * d_;
#pragma omp simd
        for (int64_t i = 0; i < d_; ++i) pr[i] += g[i];
      }
    }
    if (c.in_grad[0] && c.in_grad[0]->f32() != dy) c.in_grad[0]->copy_from(*c.out_grad[0]);
  }

 private:
  PositionalEncodingAttrs a_;
  int64_t outer_ = 0, t_ = 0, mid_ = 1, d_ = 1;
  std::vector<float> table_;  // SINUSOIDAL's P
};

}  // namespace

BKS_REGISTER_OP_DEF("PositionalEncoding", PositionalEncodingDef);
BKS_REGISTER_KERNEL("PositionalEncoding", ::bks::DeviceKind::cpu, PositionalEncodingKernel, "loops",
                    ::bks::kReferencePriority, nullptr);

}  // namespace bks
