// GRU on oneDNN's linear-before-reset GRU primitive (kernel "oneDNN GRU"; rnn_primitive.h),
// which computes our cell (gru.cc) with the gate blocks ordered u (our z), r, o (our n) and
// four bias blocks: u's and r's (ours: b_x + b_h of those gates), o's input part (b_x's n)
// and o's recurrent part inside the reset (b_h's n).
#include "ops/rnn_primitive.h"

namespace bks {
namespace {

constexpr CellSpec kGru{3, 1, true};

// Ours r, z, n; the primitive's u (our z), r, o (our n): blocks 0 and 1 swap, both ways.
const std::vector<int64_t> kSwap{1, 0, 2};

class GruRnnPrimitive final : public RnnPrimitiveKernel {
 public:
  explicit GruRnnPrimitive(const OpInit& i) : RnnPrimitiveKernel(i, kGru, 4) {}
  std::string kernel_name() const override { return "oneDNN GRU"; }

 private:
  void build(Plan& p, const memory::desc& any_wx, const memory::desc& any_wh) override {
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    const auto prop = phase_ == proto::TRAIN ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::lbr_gru_forward::desc d(prop, dir, p.x_seq, p.state, any_wx, any_wh, p.bias, p.y_seq, p.state);
    dnnl::lbr_gru_forward::primitive_desc fwd(d, user_scratchpad(), engine());
    p.fwd_pd = fwd;
    p.fwd = DnnlPrimitive(dnnl::lbr_gru_forward(fwd), fwd);
    if (phase_ != proto::TRAIN) return;
    dnnl::lbr_gru_backward::desc b(dnnl::prop_kind::backward, dir, p.x_seq, p.state, any_wx, any_wh, p.bias, p.y_seq,
                                   p.state, p.x_seq, p.state, any_wx, any_wh, p.bias, p.y_seq, p.state);
    dnnl::lbr_gru_backward::primitive_desc bwd(b, user_scratchpad(), engine(), fwd);
    p.bwd_pd = bwd;
    p.bwd = DnnlPrimitive(dnnl::lbr_gru_backward(bwd), bwd);
  }

  // Parameters: W_x (0), b_x (1), W_h (w_h()), b_h (w_h() + 1), each in blocks r, z, n.
  void to_primitive(const OpCall& c, float* wx, float* wh, float* b) const override {
    permute_gates(c.params[0]->f32(), wx, h_ * i_, kSwap);
    permute_gates(c.params[w_h()]->f32(), wh, h_ * h_, kSwap);
    const float* bx = c.params[1]->f32();
    const float* bh = c.params[w_h() + 1]->f32();
    for (int64_t d = 0; d < h_; ++d) {
      b[d] = bx[h_ + d] + bh[h_ + d];  // u: our z
      b[h_ + d] = bx[d] + bh[d];       // r
      b[2 * h_ + d] = bx[2 * h_ + d];  // o, input part: our n's b_x
      b[3 * h_ + d] = bh[2 * h_ + d];  // o, recurrent part: our n's b_h
    }
  }

  void add_grads(const float* dwx, const float* dwh, const float* db,
                 std::vector<std::vector<float>>& grads) const override {
    auto sum = [&](int k, int64_t size) -> std::vector<float>& {
      std::vector<float>& g = grads[static_cast<size_t>(k)];
      g.resize(static_cast<size_t>(size), 0.f);
      return g;
    };
    permute_gates(dwx, sum(0, 3 * h_ * i_).data(), h_ * i_, kSwap, true);
    permute_gates(dwh, sum(w_h(), 3 * h_ * h_).data(), h_ * h_, kSwap, true);
    std::vector<float>& bx = sum(1, 3 * h_);
    std::vector<float>& bh = sum(w_h() + 1, 3 * h_);
    for (int64_t d = 0; d < h_; ++d) {
      const auto r = static_cast<size_t>(d), z = static_cast<size_t>(h_ + d), n = static_cast<size_t>(2 * h_ + d);
      bx[r] += db[h_ + d], bh[r] += db[h_ + d];  // r reaches both biases
      bx[z] += db[d], bh[z] += db[d];            // u (our z) too
      bx[n] += db[2 * h_ + d];
      bh[n] += db[3 * h_ + d];
    }
  }
};

}  // namespace

BKS_REGISTER_KERNEL("GRU", ::bks::DeviceKind::cpu, GruRnnPrimitive, "oneDNN GRU", 15,
                    [](const OpInit& i) { return rnn_primitive_supports(i, kGru); });

}  // namespace bks
