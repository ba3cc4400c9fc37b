// RNN (Caffe's, recurrent_param): h_t = tanh(W_x x_t + b_h (+ W_static x_static) +
// W_h (cont_t h_{t-1})), and the output o_t = tanh(W_o h_t + b_o). Parameters after W_h:
// W_o (H, H), b_o (H). One state, h.
#include <algorithm>
#include <cmath>

#include "ops/recurrent.h"

namespace bks {
namespace {

constexpr CellSpec kRnn{1, 1};

class RnnDef final : public RecurrentDef {
 public:
  RnnDef() : RecurrentDef(kRnn) {}

 protected:
  void extra_params(const RecurrentAttrs& a, std::vector<ParamDecl>& p) const override {
    p.push_back({{a.num_output, a.num_output}, a.weight_filler, true});
    p.push_back({{a.num_output}, a.bias_filler, true});
  }
};

class RnnKernel : public RecurrentKernel {
 public:
  RnnKernel(const OpInit& i, bool fast) : RecurrentKernel(i, kRnn, fast) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    RecurrentKernel::reshape(in, out);
    hs_.assign(hc_.size(), 0.f);
    o_.assign(hc_.size(), 0.f);
    do_.assign(hc_.size(), 0.f);
    dhs_.assign(hc_.size(), 0.f);
    r_.assign(static_cast<size_t>(n_ * h_), 0.f);
    dh_.assign(r_.size(), 0.f);
    dhc_.assign(r_.size(), 0.f);
  }

  void forward(OpCall& c) override {
    project_inputs(c);
    const float* cont = c.in[1]->f32();
    const float* h_prev = initial_state(c, 0);
    for (int64_t t = 0; t < t_; ++t) {
      float* hc = row(hc_, t, h_);
      times_cont(t, cont, h_prev, hc);
      gemm(g_h_, hc, c.params[w_h()]->f32(), r_.data());
      const float* g = row(g_, t, h_);
      float* h = row(hs_, t, h_);
      for (int64_t j = 0; j < n_ * h_; ++j) h[j] = tanh_vec(g[j] + r_[static_cast<size_t>(j)]);
      h_prev = h;
    }
    final_state(c, 0, h_prev);
    gemm(g_o_, hs_.data(), c.params[w_h() + 1]->f32(), o_.data(), c.params[w_h() + 2]->f32());
    float* y = c.out[0]->f32();
    for (size_t j = 0; j < o_.size(); ++j) y[j] = o_[j] = tanh_vec(o_[j]);
  }

  void backward(OpCall& c) override {
    const float* cont = c.in[1]->f32();
    const float* dy = c.out_grad[0] ? c.out_grad[0]->f32() : nullptr;
    for (size_t j = 0; j < do_.size(); ++j) do_[j] = dy ? dy[j] * (1.f - o_[j] * o_[j]) : 0.f;
    if (Tensor* dwo = c.param_grad[w_h() + 1]) gemm(g_dwo_, do_.data(), hs_.data(), dwo->f32());
    if (Tensor* dbo = c.param_grad[w_h() + 2]) sum_rows(do_.data(), t_ * n_, h_, dbo->f32());
    gemm(g_dhs_, do_.data(), c.params[w_h() + 1]->f32(), dhs_.data());
    const float* dh_end = final_state_grad(c, 0);
    for (size_t j = 0; j < dh_.size(); ++j) dh_[j] = dh_end ? dh_end[j] : 0.f;
    for (int64_t t = t_ - 1; t >= 0; --t) {
      const float* h = row(hs_, t, h_);
      const float* dhs = row(dhs_, t, h_);
      float* dg = row(dg_, t, h_);
      for (int64_t j = 0; j < n_ * h_; ++j) dg[j] = (dhs[j] + dh_[static_cast<size_t>(j)]) * (1.f - h[j] * h[j]);
      gemm(g_dhc_, dg, c.params[w_h()]->f32(), dhc_.data());
      times_cont(t, cont, dhc_.data(), dh_.data());
    }
    if (float* d = initial_state_grad(c, 0)) std::copy(dh_.begin(), dh_.end(), d);
    recurrent_weight_grads(c, dg_.data());
    project_input_grads(c);
  }

 protected:
  void add_gemms() override {
    g_o_ = gemms_.add({'N', 'T', t_ * n_, h_, h_, true});
    if (phase_ != proto::TRAIN) return;
    g_dwo_ = gemms_.add({'T', 'N', h_, h_, t_ * n_, false});
    g_dhs_ = gemms_.add({'N', 'N', t_ * n_, h_, h_, false});
  }

 private:
  std::vector<float> hs_, o_, do_, dhs_, r_, dh_, dhc_;
  int g_o_ = -1, g_dwo_ = -1, g_dhs_ = -1;
};

using RnnLoops = RecurrentKernelOf<RnnKernel, false>;
using RnnOneDnn = RecurrentKernelOf<RnnKernel, true>;

}  // namespace

BKS_REGISTER_OP_DEF("RNN", RnnDef);
BKS_REGISTER_KERNEL("RNN", ::bks::DeviceKind::cpu, RnnLoops, "loops", ::bks::kReferencePriority, nullptr);
BKS_REGISTER_KERNEL("RNN", ::bks::DeviceKind::cpu, RnnOneDnn, "oneDNN", 10, nullptr);

}  // namespace bks
