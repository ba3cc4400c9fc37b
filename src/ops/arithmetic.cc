// Arithmetic (arithmetic_param): a + b, a - b, a * b or a / b of two bottoms with NumPy
// broadcasting, ONNX's Add/Sub/Mul/Div between computed tensors of different shapes
// (a LayerNorm written out: x - mean(x), divided by the deviation). Eltwise stays the op for
// equal shapes, which deploy's residual fusion knows.
#include <algorithm>

#include "core/parallel.h"
#include "ops/broadcast.h"
#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kArithmeticOps[] = {"ADD", "SUB", "MUL", "DIV"};

struct ArithmeticAttrs final : AttrsOf<ArithmeticAttrs> {
  enum Operation { add, sub, mul, div };  // ArithmeticParameter's values
  int operation = add;
  void visit(AttrVisitor& v) override { v.field("operation", operation, kArithmeticOps); }
};
void arithmetic_from_caffe(const proto::LayerParameter& l, ArithmeticAttrs& a, const std::string&) {
  a.operation = static_cast<int>(l.arithmetic_param().operation());
}
void arithmetic_to_caffe(const ArithmeticAttrs& a, proto::LayerParameter& l) {
  l.mutable_arithmetic_param()->set_operation(static_cast<proto::ArithmeticParameter::Operation>(a.operation));
}
BKS_REGISTER_ATTRS("Arithmetic", ArithmeticAttrs, arithmetic_from_caffe, arithmetic_to_caffe);

class ArithmeticDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (!broadcast_shapes(in[0], in[1], out[0]))
      c.fail("bottoms {} and {} do not broadcast", shape_str(in[0]), shape_str(in[1]));
  }
  // Sums and differences have gradients that read neither bottom.
  OpFacts facts(const OpContext& c, const std::vector<Shape>&) const override {
    OpFacts f;
    const int op = c.node.attrs.as<ArithmeticAttrs>().operation;
    f.backward_reads_input = op == ArithmeticAttrs::mul || op == ArithmeticAttrs::div;
    return f;
  }
};

// The output as rows along its last axis; a row of each bottom is a run of its own (its
// last axis equals the output's) or one value read for the whole row (its last axis is 1).
class ArithmeticKernel final : public Kernel {
 public:
  explicit ArithmeticKernel(const OpInit& i) : Kernel(i), op_(i.node.attrs.as<ArithmeticAttrs>().operation) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    Shape o = out[0].empty() ? Shape{1} : out[0];
    inner_ = o.back();
    o.pop_back();
    rows_ = shape_numel(o);
    for (int k = 0; k < 2; ++k) {
      Shape s = in[k];
      s.insert(s.begin(), out[0].size() + (out[0].empty() ? 1 : 0) - s.size(), 1);
      step_[k] = s.back() == 1 ? 0 : 1;
      const int64_t len = s.back();
      s.pop_back();
      row_[k] = broadcast_index(s, o);
      for (int64_t& r : row_[k]) r *= len;
      numel_[k] = shape_numel(in[k]);
    }
  }

  void forward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* b = c.in[1]->f32();
    float* y = c.out[0]->f32();
    switch (op_) {
      case ArithmeticAttrs::add: return apply(a, b, y, [](float u, float v) { return u + v; });
      case ArithmeticAttrs::sub: return apply(a, b, y, [](float u, float v) { return u - v; });
      case ArithmeticAttrs::mul: return apply(a, b, y, [](float u, float v) { return u * v; });
      default: return apply(a, b, y, [](float u, float v) { return u / v; });
    }
  }

  // Each bottom's gradient sums dy * d(a op b)/d(bottom) over the outputs it reached.
  void backward(OpCall& c) override {
    const float* dy = c.out_grad[0]->f32();
    const bool reads = op_ == ArithmeticAttrs::mul || op_ == ArithmeticAttrs::div;
    const float* a = reads ? c.in[0]->f32() : nullptr;
    const float* b = reads ? c.in[1]->f32() : nullptr;
    float* g[2] = {c.in_grad[0] ? c.in_grad[0]->f32() : nullptr, c.in_grad[1] ? c.in_grad[1]->f32() : nullptr};
    for (int k = 0; k < 2; ++k)
      if (g[k]) std::fill(g[k], g[k] + numel_[k], 0.f);
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t ra = row_[0][r], rb = row_[1][r];
      for (int64_t i = 0; i < inner_; ++i) {
        const int64_t ia = ra + i * step_[0], ib = rb + i * step_[1];
        const float d = dy[r * inner_ + i];
        float da = d, db = d;
        switch (op_) {
          case ArithmeticAttrs::sub: db = -d; break;
          case ArithmeticAttrs::mul: da = d * b[ib], db = d * a[ia]; break;
          case ArithmeticAttrs::div: da = d / b[ib], db = -d * a[ia] / (b[ib] * b[ib]); break;
          default: break;
        }
        if (g[0]) g[0][ia] += da;
        if (g[1]) g[1][ib] += db;
      }
    }
  }

 private:
  template <class F>
  void apply(const float* a, const float* b, float* y, F f) const {
    parallel_ranges(
        rows_,
        [&](int64_t r0, int64_t r1) {
          const int64_t sa = step_[0], sb = step_[1];
          for (int64_t r = r0; r < r1; ++r) {
            const float* pa = a + row_[0][r];
            const float* pb = b + row_[1][r];
            float* py = y + r * inner_;
#pragma omp simd
            for (int64_t i = 0; i < inner_; ++i) py[i] = f(pa[i * sa], pb[i * sb]);
          }
        },
        kSerialBelow / std::max<int64_t>(inner_, 1));
  }

  int op_;
  int64_t rows_ = 0, inner_ = 1;
  int64_t step_[2] = {1, 1}, numel_[2] = {0, 0};
  std::vector<int64_t> row_[2];  // per output row, the offset of each bottom's row
};

}  // namespace

BKS_REGISTER_OP_DEF("Arithmetic", ArithmeticDef);
BKS_REGISTER_KERNEL("Arithmetic", ::bks::DeviceKind::cpu, ArithmeticKernel, "loops", ::bks::kReferencePriority,
                    nullptr);

}  // namespace bks
