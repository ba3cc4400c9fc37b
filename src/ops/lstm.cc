// LSTM (Caffe's, recurrent_param): gate blocks i, f, o, g of G_t = W_x x_t + b (+ W_static
// x_static) + W_h (cont_t h_{t-1}), then
//   i, f, o = logistic(.), g = tanh(.), c_t = cont_t f c_{t-1} + i g, h_t = o tanh(c_t);
// the output is every h_t. States: h, then c.
#include <algorithm>
#include <cmath>

#include "ops/recurrent.h"

namespace bks {
namespace {

constexpr CellSpec kLstm{4, 2};

class LstmDef final : public RecurrentDef {
 public:
  LstmDef() : RecurrentDef(kLstm) {}
};

class LstmKernel : public RecurrentKernel {
 public:
  LstmKernel(const OpInit& i, bool fast) : RecurrentKernel(i, kLstm, fast) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    RecurrentKernel::reshape(in, out);
    act_.assign(g_.size(), 0.f);
    c_.assign(hc_.size(), 0.f);
    r_.assign(static_cast<size_t>(n_ * gh_), 0.f);
    dh_.assign(static_cast<size_t>(n_ * h_), 0.f);
    dc_.assign(dh_.size(), 0.f);
    dhc_.assign(dh_.size(), 0.f);
    c0_.assign(dh_.size(), 0.f);
  }

  void forward(OpCall& c) override {
    project_inputs(c);
    const float* cont = c.in[1]->f32();
    const float* wh = c.params[w_h()]->f32();
    float* y = c.out[0]->f32();
    const float* h_prev = initial_state(c, 0);
    const float* c_prev = initial_state(c, 1);
    // Backward needs the initial c, which a carried state loses to the final one.
    std::copy(c_prev, c_prev + n_ * h_, c0_.begin());
    for (int64_t t = 0; t < t_; ++t) {
      float* hc = row(hc_, t, h_);
      times_cont(t, cont, h_prev, hc);
      gemm(g_h_, hc, wh, r_.data());
      const float* g = row(g_, t, gh_);
      float* act = row(act_, t, gh_);
      float* ct = row(c_, t, h_);
      float* ht = y + t * n_ * h_;
      for (int64_t n = 0; n < n_; ++n) {
        const float k = cont[t * n_ + n];
        for (int64_t d = 0; d < h_; ++d) {
          const int64_t b = n * gh_ + d;
          const LstmGates a = lstm_gates(g[b] + r_[b], g[b + h_] + r_[b + h_], g[b + 2 * h_] + r_[b + 2 * h_],
                                         g[b + 3 * h_] + r_[b + 3 * h_]);
          act[b] = a.i, act[b + h_] = a.f, act[b + 2 * h_] = a.o, act[b + 3 * h_] = a.g;
          const float cell = lstm_cell(a, k, c_prev[n * h_ + d]);
          ct[n * h_ + d] = cell;
          ht[n * h_ + d] = a.o * tanh_vec(cell);
        }
      }
      h_prev = ht;
      c_prev = ct;
    }
    final_state(c, 0, h_prev);
    final_state(c, 1, c_prev);
  }

  void backward(OpCall& c) override {
    const float* cont = c.in[1]->f32();
    const float* wh = c.params[w_h()]->f32();
    const float* dy = c.out_grad[0] ? c.out_grad[0]->f32() : nullptr;
    const float* dh_end = final_state_grad(c, 0);
    const float* dc_end = final_state_grad(c, 1);
    for (size_t j = 0; j < dh_.size(); ++j) {
      dh_[j] = dh_end ? dh_end[j] : 0.f;
      dc_[j] = dc_end ? dc_end[j] : 0.f;
    }
    for (int64_t t = t_ - 1; t >= 0; --t) {
      const float* act = row(act_, t, gh_);
      const float* ct = row(c_, t, h_);
      const float* c_prev = t > 0 ? row(c_, t - 1, h_) : c0_.data();
      float* dg = row(dg_, t, gh_);
      for (int64_t n = 0; n < n_; ++n) {
        const float k = cont[t * n_ + n];
        for (int64_t d = 0; d < h_; ++d) {
          const int64_t b = n * gh_ + d, s = n * h_ + d;
          const LstmGates a{act[b], act[b + h_], act[b + 2 * h_], act[b + 3 * h_]};
          const float dh = dh_[s] + (dy ? dy[t * n_ * h_ + s] : 0.f);
          const LstmStepGrad grad = lstm_step_grad(a, k, c_prev[s], ct[s], dc_[s], dh);
          dg[b] = grad.i, dg[b + h_] = grad.f, dg[b + 2 * h_] = grad.o, dg[b + 3 * h_] = grad.g;
          dc_[s] = grad.c_prev;
        }
      }
      gemm(g_dhc_, dg, wh, dhc_.data());
      times_cont(t, cont, dhc_.data(), dh_.data());
    }
    if (float* d = initial_state_grad(c, 0)) std::copy(dh_.begin(), dh_.end(), d);
    if (float* d = initial_state_grad(c, 1)) std::copy(dc_.begin(), dc_.end(), d);
    recurrent_weight_grads(c, dg_.data());
    project_input_grads(c);
  }

 private:
  std::vector<float> act_, c_, r_, dh_, dc_, dhc_, c0_;
};

using LstmLoops = RecurrentKernelOf<LstmKernel, false>;
using LstmOneDnn = RecurrentKernelOf<LstmKernel, true>;

}  // namespace

BKS_REGISTER_OP_DEF("LSTM", LstmDef);
BKS_REGISTER_KERNEL("LSTM", ::bks::DeviceKind::cpu, LstmLoops, "loops", ::bks::kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("LSTM", ::bks::DeviceKind::cpu, LstmOneDnn, "oneDNN", 10, nullptr);

}  // namespace bks
