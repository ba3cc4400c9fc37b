// LSTMUnit (Caffe's): one LSTM step, the cell that Caffe's unrolled LSTM repeats. Bottoms
// c_prev (1, N, H), the gate inputs X (1, N, 4H) in blocks i, f, o, g, and cont (1, N); tops
//   c = cont f c_prev + i g   and   h = o tanh(c),
// with i, f, o = sigmoid and g = tanh of their blocks. No gradient to cont.
#include <cmath>

#include "ops/recurrent.h"

namespace bks {
namespace {

class LstmUnitDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 3; }
  int min_outputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    if (in[0].size() != 3 || in[0][0] != 1)
      c.fail("bottom 0 (c_prev) must be (1, streams, hidden), got {}", shape_str(in[0]));
    const int64_t n = in[0][1], h = in[0][2];
    if (in[1] != Shape{1, n, 4 * h})
      c.fail("bottom 1 (the gate inputs) must be (1, {}, {}), four blocks of {}, got {}", n, 4 * h, h,
             shape_str(in[1]));
    if (in[2] != Shape{1, n}) c.fail("bottom 2 (cont) must be (1, {}), got {}", n, shape_str(in[2]));
    out[0] = out[1] = in[0];
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.can_propagate_to = {true, true, false};
    f.backward_reads_output = true;  // c
    return f;
  }
};

class LstmUnitKernel final : public Kernel {
 public:
  explicit LstmUnitKernel(const OpInit& i) : Kernel(i) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    n_ = in[0][1];
    h_ = in[0][2];
  }
  void forward(OpCall& c) override {
    const float *c_prev = c.in[0]->f32(), *x = c.in[1]->f32(), *cont = c.in[2]->f32();
    float *cell = c.out[0]->f32(), *h = c.out[1]->f32();
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t d = 0; d < h_; ++d) {
        const float* g = x + n * 4 * h_ + d;
        const int64_t s = n * h_ + d;
        const LstmGates a = lstm_gates(g[0], g[h_], g[2 * h_], g[3 * h_]);
        cell[s] = lstm_cell(a, cont[n], c_prev[s]);
        h[s] = a.o * tanh_vec(cell[s]);
      }
  }
  void backward(OpCall& c) override {
    const float *c_prev = c.in[0]->f32(), *x = c.in[1]->f32(), *cont = c.in[2]->f32(), *cell = c.out[0]->f32();
    const float* dcell = c.out_grad[0] ? c.out_grad[0]->f32() : nullptr;
    const float* dh = c.out_grad[1] ? c.out_grad[1]->f32() : nullptr;
    float* dc_prev = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr;
    float* dx = c.in_grad[1] ? c.in_grad[1]->f32() : nullptr;
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t d = 0; d < h_; ++d) {
        const float* g = x + n * 4 * h_ + d;
        const int64_t s = n * h_ + d;
        const LstmGates a = lstm_gates(g[0], g[h_], g[2 * h_], g[3 * h_]);
        const LstmStepGrad grad =
            lstm_step_grad(a, cont[n], c_prev[s], cell[s], dcell ? dcell[s] : 0.f, dh ? dh[s] : 0.f);
        if (dc_prev) dc_prev[s] = grad.c_prev;
        if (!dx) continue;
        float* dg = dx + n * 4 * h_ + d;
        dg[0] = grad.i, dg[h_] = grad.f, dg[2 * h_] = grad.o, dg[3 * h_] = grad.g;
      }
  }

 private:
  int64_t n_ = 0, h_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("LSTMUnit", LstmUnitDef);
BKS_REGISTER_KERNEL("LSTMUnit", ::bks::DeviceKind::cpu, LstmUnitKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
