// Caffe's RNN on oneDNN's vanilla RNN primitive with tanh (kernel "oneDNN RNN";
// rnn_primitive.h): the primitive computes h_t = tanh(W_x x_t + b_h + W_h hc) over the
// sequence; the output layer o_t = tanh(W_o h_t + b_o) is one GEMM over every step after it,
// and its gradient reaches h before the primitive's backward runs.
#include "ops/rnn_primitive.h"

namespace bks {
namespace {

constexpr CellSpec kRnn{1, 1};

class RnnRnnPrimitive final : public RnnPrimitiveKernel {
 public:
  explicit RnnRnnPrimitive(const OpInit& i) : RnnPrimitiveKernel(i, kRnn, 1) {}
  std::string kernel_name() const override { return "oneDNN RNN"; }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    RnnPrimitiveKernel::reshape(in, out);
    hs_.assign(static_cast<size_t>(t_ * n_ * h_), 0.f);
    o_.assign(hs_.size(), 0.f);
    do_.assign(hs_.size(), 0.f);
    dhs_.assign(hs_.size(), 0.f);
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    RnnPrimitiveKernel::prepare(in, out);
    gemms_.clear();
    const bool constant = constant_params_ && phase_ != proto::TRAIN;
    g_o_ = gemms_.add({'N', 'T', t_ * n_, h_, h_, true, constant});
    if (phase_ == proto::TRAIN) {
      g_dwo_ = gemms_.add({'T', 'N', h_, h_, t_ * n_, false});
      g_dhs_ = gemms_.add({'N', 'N', t_ * n_, h_, h_, false});
    }
    gemms_.prepare(&engine(), true);
  }

 private:
  void build(Plan& p, const memory::desc& any_wx, const memory::desc& any_wh) override {
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    const auto tanh = dnnl::algorithm::eltwise_tanh;
    const auto prop = phase_ == proto::TRAIN ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::vanilla_rnn_forward::desc d(prop, tanh, dir, p.x_seq, p.state, any_wx, any_wh, p.bias, p.y_seq, p.state);
    dnnl::vanilla_rnn_forward::primitive_desc fwd(d, user_scratchpad(), engine());
    p.fwd_pd = fwd;
    p.fwd = DnnlPrimitive(dnnl::vanilla_rnn_forward(fwd), fwd);
    if (phase_ != proto::TRAIN) return;
    dnnl::vanilla_rnn_backward::desc b(dnnl::prop_kind::backward, tanh, dir, p.x_seq, p.state, any_wx, any_wh, p.bias,
                                       p.y_seq, p.state, p.x_seq, p.state, any_wx, any_wh, p.bias, p.y_seq, p.state);
    dnnl::vanilla_rnn_backward::primitive_desc bwd(b, user_scratchpad(), engine(), fwd);
    p.bwd_pd = bwd;
    p.bwd = DnnlPrimitive(dnnl::vanilla_rnn_backward(bwd), bwd);
  }

  // One gate: the layouts are the same; W_x (0), b_h (1), W_h (w_h()).
  void to_primitive(const OpCall& c, float* wx, float* wh, float* b) const override {
    std::copy_n(c.params[0]->f32(), h_ * i_, wx);
    std::copy_n(c.params[w_h()]->f32(), h_ * h_, wh);
    std::copy_n(c.params[1]->f32(), h_, b);
  }

  void add_grads(const float* dwx, const float* dwh, const float* db,
                 std::vector<std::vector<float>>& grads) const override {
    for (auto [k, from, size] : {std::tuple{0, dwx, h_ * i_}, std::tuple{1, db, h_}, std::tuple{w_h(), dwh, h_ * h_}}) {
      std::vector<float>& g = grads[static_cast<size_t>(k)];
      g.resize(static_cast<size_t>(size), 0.f);
      for (int64_t j = 0; j < size; ++j) g[static_cast<size_t>(j)] += from[j];
    }
  }

  void write_outputs(OpCall& c, const float* h) override {
    std::copy_n(h, hs_.size(), hs_.begin());  // the output layer's backward reads them
    gemm(g_o_, h, c.params[w_h() + 1]->f32(), o_.data(), c.params[w_h() + 2]->f32());
    float* y = c.out[0]->f32();
    for (size_t j = 0; j < o_.size(); ++j) y[j] = o_[j] = tanh_vec(o_[j]);
  }

  // Through o = tanh(W_o h + b_o): W_o's and b_o's gradients, and h's.
  const float* grad_reaching_h(OpCall& c, const float* dy) override {
    for (size_t j = 0; j < do_.size(); ++j) do_[j] = dy ? dy[j] * (1.f - o_[j] * o_[j]) : 0.f;
    if (Tensor* dwo = c.param_grad[w_h() + 1]) gemm(g_dwo_, do_.data(), hs_.data(), dwo->f32());
    if (Tensor* dbo = c.param_grad[w_h() + 2]) sum_rows(do_.data(), t_ * n_, h_, dbo->f32());
    gemm(g_dhs_, do_.data(), c.params[w_h() + 1]->f32(), dhs_.data());
    return dhs_.data();
  }

  std::vector<float> hs_, o_, do_, dhs_;
  int g_o_ = -1, g_dwo_ = -1, g_dhs_ = -1;
};

}  // namespace

BKS_REGISTER_KERNEL("RNN", ::bks::DeviceKind::cpu, RnnRnnPrimitive, "oneDNN RNN", 5,
                    [](const OpInit& i) { return rnn_primitive_supports(i, kRnn); });

}  // namespace bks
