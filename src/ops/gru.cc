// GRU (bakusoku's, recurrent_param, in Caffe's recurrent conventions): gate blocks r, z, n
// as PyTorch, cuDNN and oneDNN's linear-before-reset GRU order them, with
// X = W_x x_t + b_x (+ W_static x_static), R = W_h hc + b_h, hc = cont_t h_{t-1}:
//   r = logistic(X_r + R_r), z = logistic(X_z + R_z), n = tanh(X_n + r R_n),
//   h_t = (1 - z) n + z hc.
// Parameters: W_x (3H, I), b_x, [W_static], W_h (3H, H), b_h (3H). One state, h.
#include <algorithm>
#include <cmath>

#include "ops/recurrent.h"

namespace bks {
namespace {

constexpr CellSpec kGru{3, 1, true};

class GruDef final : public RecurrentDef {
 public:
  GruDef() : RecurrentDef(kGru) {}
};

class GruKernel : public RecurrentKernel {
 public:
  GruKernel(const OpInit& i, bool fast) : RecurrentKernel(i, kGru, fast) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    RecurrentKernel::reshape(in, out);
    act_.assign(g_.size(), 0.f);
    r_.assign(g_.size(), 0.f);
    dr_.assign(g_.size(), 0.f);
    dh_.assign(static_cast<size_t>(n_ * h_), 0.f);
    dhc_.assign(dh_.size(), 0.f);
  }

  void forward(OpCall& c) override {
    project_inputs(c);
    const float* cont = c.in[1]->f32();
    const float* h_prev = initial_state(c, 0);
    float* y = c.out[0]->f32();
    for (int64_t t = 0; t < t_; ++t) {
      float* hc = row(hc_, t, h_);
      times_cont(t, cont, h_prev, hc);
      float* r = row(r_, t, gh_);
      gemm(g_h_, hc, c.params[w_h()]->f32(), r, c.params[w_h() + 1]->f32());
      const float* g = row(g_, t, gh_);
      float* act = row(act_, t, gh_);
      float* h = y + t * n_ * h_;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t d = 0; d < h_; ++d) {
          const int64_t b = n * gh_ + d, s = n * h_ + d;
          const float rg = logistic(g[b] + r[b]), z = logistic(g[b + h_] + r[b + h_]);
          const float nn = tanh_vec(g[b + 2 * h_] + rg * r[b + 2 * h_]);
          act[b] = rg, act[b + h_] = z, act[b + 2 * h_] = nn;
          h[s] = (1.f - z) * nn + z * hc[s];
        }
      h_prev = h;
    }
    final_state(c, 0, h_prev);
  }

  void backward(OpCall& c) override {
    const float* cont = c.in[1]->f32();
    const float* dy = c.out_grad[0] ? c.out_grad[0]->f32() : nullptr;
    const float* dh_end = final_state_grad(c, 0);
    for (size_t j = 0; j < dh_.size(); ++j) dh_[j] = dh_end ? dh_end[j] : 0.f;
    for (int64_t t = t_ - 1; t >= 0; --t) {
      const float* act = row(act_, t, gh_);
      const float* r = row(r_, t, gh_);
      const float* hc = row(hc_, t, h_);
      float* dg = row(dg_, t, gh_);
      float* dr = row(dr_, t, gh_);
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t d = 0; d < h_; ++d) {
          const int64_t b = n * gh_ + d, s = n * h_ + d;
          const float rg = act[b], z = act[b + h_], nn = act[b + 2 * h_];
          const float dh = dh_[static_cast<size_t>(s)] + (dy ? dy[t * n_ * h_ + s] : 0.f);
          const float dn = dh * (1.f - z) * (1.f - nn * nn);
          dg[b] = dr[b] = dn * r[b + 2 * h_] * rg * (1.f - rg);
          dg[b + h_] = dr[b + h_] = dh * (hc[s] - nn) * z * (1.f - z);
          dg[b + 2 * h_] = dn;
          dr[b + 2 * h_] = dn * rg;
          dh_[static_cast<size_t>(s)] = dh * z;  // hc's direct share; W_h's is added below
        }
      gemm(g_dhc_, dr, c.params[w_h()]->f32(), dhc_.data());
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t d = 0; d < h_; ++d) {
          const size_t s = static_cast<size_t>(n * h_ + d);
          dh_[s] = cont[t * n_ + n] * (dh_[s] + dhc_[s]);
        }
    }
    if (float* d = initial_state_grad(c, 0)) std::copy(dh_.begin(), dh_.end(), d);
    recurrent_weight_grads(c, dr_.data());
    project_input_grads(c);
  }

 private:
  std::vector<float> act_, r_, dr_, dh_, dhc_;
};

using GruLoops = RecurrentKernelOf<GruKernel, false>;
using GruOneDnn = RecurrentKernelOf<GruKernel, true>;

}  // namespace

BKS_REGISTER_OP_DEF("GRU", GruDef);
BKS_REGISTER_KERNEL("GRU", ::bks::DeviceKind::cpu, GruLoops, "loops", ::bks::kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("GRU", ::bks::DeviceKind::cpu, GruOneDnn, "oneDNN", 10, nullptr);

}  // namespace bks
