// LSTM on oneDNN's LSTM primitive (kernel "oneDNN LSTM"; rnn_primitive.h). oneDNN orders
// the gate blocks i, f, c~, o and Caffe i, f, o, g: the weights, the bias and their
// gradients pass through a copy that swaps blocks 2 and 3. Both add one bias.
#include "ops/rnn_primitive.h"

namespace bks {
namespace {

constexpr CellSpec kLstm{4, 2};

// Blocks 2 and 3 swap, both ways.
const std::vector<int64_t> kSwap{0, 1, 3, 2};

class LstmRnnPrimitive final : public RnnPrimitiveKernel {
 public:
  explicit LstmRnnPrimitive(const OpInit& i) : RnnPrimitiveKernel(i, kLstm, 4) {}
  std::string kernel_name() const override { return "oneDNN LSTM"; }

 private:
  void build(Plan& p, const memory::desc& any_wx, const memory::desc& any_wh) override {
    const auto dir = dnnl::rnn_direction::unidirectional_left2right;
    const auto prop = phase_ == proto::TRAIN ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::lstm_forward::desc d(prop, dir, p.x_seq, p.state, p.state, any_wx, any_wh, p.bias, p.y_seq, p.state, p.state);
    dnnl::lstm_forward::primitive_desc fwd(d, user_scratchpad(), engine());
    p.fwd_pd = fwd;
    p.fwd = DnnlPrimitive(dnnl::lstm_forward(fwd), fwd);
    if (phase_ != proto::TRAIN) return;
    dnnl::lstm_backward::desc b(dnnl::prop_kind::backward, dir, p.x_seq, p.state, p.state, any_wx, any_wh, p.bias,
                                p.y_seq, p.state, p.state, p.x_seq, p.state, p.state, any_wx, any_wh, p.bias, p.y_seq,
                                p.state, p.state);
    dnnl::lstm_backward::primitive_desc bwd(b, user_scratchpad(), engine(), fwd);
    p.bwd_pd = bwd;
    p.bwd = DnnlPrimitive(dnnl::lstm_backward(bwd), bwd);
  }

  void to_primitive(const OpCall& c, float* wx, float* wh, float* b) const override {
    permute_gates(c.params[0]->f32(), wx, h_ * i_, kSwap);
    permute_gates(c.params[w_h()]->f32(), wh, h_ * h_, kSwap);
    permute_gates(c.params[1]->f32(), b, h_, kSwap);
  }

  void add_grads(const float* dwx, const float* dwh, const float* db,
                 std::vector<std::vector<float>>& grads) const override {
    for (auto [k, from, block] :
         {std::tuple{0, dwx, h_ * i_}, std::tuple{1, db, h_}, std::tuple{w_h(), dwh, h_ * h_}}) {
      std::vector<float>& g = grads[static_cast<size_t>(k)];
      g.resize(static_cast<size_t>(4 * block), 0.f);
      permute_gates(from, g.data(), block, kSwap, true);
    }
  }
};

}  // namespace

BKS_REGISTER_KERNEL("LSTM", ::bks::DeviceKind::cpu, LstmRnnPrimitive, "oneDNN LSTM", 15,
                    [](const OpInit& i) { return rnn_primitive_supports(i, kLstm); });

}  // namespace bks
