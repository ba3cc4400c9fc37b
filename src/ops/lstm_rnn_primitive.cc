// LSTM on oneDNN's LSTM primitive (lstm_forward / lstm_backward): the whole sequence, its
// gates, cell and recurrence in one call, instead of one matmul per timestep.
//
// Where the semantics differ, and how they are made to match:
// - Gate blocks: oneDNN orders them i, f, c~, o; Caffe i, f, o, g. The weights, bias and
//   their gradients pass through a copy that swaps blocks 2 and 3.
// - cont: the primitive has no per-step reset. cont_t scales the state carried into step t
//   (h and c alike; see recurrent.h), so time is cut into segments at every t > 0 where some
//   stream's cont_t is not 1. Each segment is one primitive call whose initial state is the
//   state so far times cont at its first step. The usual truncated-BPTT batch (a reset only
//   at t = 0, or none) is one segment.
// - A static input has no place in the primitive: those layers run the matmul kernel.
#include <cstring>
#include <map>

#include "backend/dnnl_util.h"
#include "ops/recurrent.h"

namespace bks {
namespace {

constexpr CellSpec kLstm{4, 2};
using tag = memory::format_tag;
using dt = memory::data_type;

// Copies `gates` blocks of `block` floats, swapping blocks 2 and 3 (Caffe's o, g and
// oneDNN's c~, o), which makes the conversion its own inverse.
void swap_gate_blocks(const float* from, float* to, int64_t block, bool add = false) {
  const int64_t order[4] = {0, 1, 3, 2};
  for (int g = 0; g < 4; ++g) {
    const float* f = from + order[g] * block;
    float* t = to + g * block;
    if (add)
      for (int64_t j = 0; j < block; ++j) t[j] += f[j];
    else
      std::memcpy(t, f, static_cast<size_t>(block) * sizeof(float));
  }
}

bool without_static_input(const OpInit& i) {
  return !has_static_input(i.node.attrs.as<RecurrentAttrs>(), kLstm, i.node.inputs.size());
}

class LstmRnnPrimitive final : public RecurrentKernel {
 public:
  explicit LstmRnnPrimitive(const OpInit& i) : RecurrentKernel(i, kLstm, true) {}
  std::string kernel_name() const override { return "oneDNN LSTM"; }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    set_geometry(in);
    converted_ = false;
    check_shape({t_, n_, h_}, sizeof(float), where_ + ": the outputs kept for backward");
    const auto nh = static_cast<size_t>(n_ * h_);
    y_.assign(static_cast<size_t>(t_) * nh, 0.f);
    h0_.assign(static_cast<size_t>(t_) * nh, 0.f);  // a segment starts at most at every step
    c0_.assign(h0_.size(), 0.f);
    ht_.assign(h0_.size(), 0.f);
    ct_.assign(h0_.size(), 0.f);
    wx_.assign(static_cast<size_t>(gh_ * i_), 0.f);
    wh_.assign(static_cast<size_t>(gh_ * h_), 0.f);
    b_.assign(static_cast<size_t>(gh_), 0.f);
    dh_.assign(nh, 0.f);
    dc_.assign(nh, 0.f);
    dh_in_.assign(nh, 0.f);
    dc_in_.assign(nh, 0.f);
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    plans_.clear();
    workspaces_.clear();
    plan(t_);  // the usual single segment; others are built the first time they occur
  }

  void forward(OpCall& c) override {
    const float* cont = c.in[1]->f32();
    cut_segments(cont);
    convert_params(c);
    const float* x = c.in[0]->f32();
    const float* h = initial_state(c, 0);
    const float* cs = initial_state(c, 1);
    const int64_t nh = n_ * h_;
    if (phase_ == proto::TRAIN) workspaces_.resize(segments_.size());
    for (size_t k = 0; k < segments_.size(); ++k) {
      const int64_t t0 = segments_[k], len = segment_length(k);
      Plan& p = plan(len);
      times_cont(t0, cont, h, h0_.data() + k * nh);
      times_cont(t0, cont, cs, c0_.data() + k * nh);
      std::unordered_map<int, memory> args = state_args(p, k, x + t0 * n_ * i_, y_.data() + t0 * nh);
      args[DNNL_ARG_WEIGHTS_LAYER] = p.wx.read(stream(), wx_.data());
      args[DNNL_ARG_WEIGHTS_ITER] = p.wh.read(stream(), wh_.data());
      if (phase_ == proto::TRAIN) {
        if (!workspaces_[k] || workspaces_[k].get_desc() != p.fwd_pd.workspace_desc())
          workspaces_[k] = memory(p.fwd_pd.workspace_desc(), engine());
        args[DNNL_ARG_WORKSPACE] = workspaces_[k];
      }
      p.fwd.execute(stream(), args);
      h = ht_.data() + k * nh;
      cs = ct_.data() + k * nh;
    }
    std::memcpy(c.out[0]->f32(), y_.data(), y_.size() * sizeof(float));
    final_state(c, 0, h);
    final_state(c, 1, cs);
  }

  void backward(OpCall& c) override {
    const float* cont = c.in[1]->f32();
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0] ? c.out_grad[0]->f32() : nullptr;
    float* dx = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr;
    if (!dy) zeros_.assign(y_.size(), 0.f);
    if (!dx) dx_.resize(static_cast<size_t>(t_ * n_ * i_));
    const float* dh_end = final_state_grad(c, 0);
    const float* dc_end = final_state_grad(c, 1);
    for (size_t j = 0; j < dh_.size(); ++j) {
      dh_[j] = dh_end ? dh_end[j] : 0.f;
      dc_[j] = dc_end ? dc_end[j] : 0.f;
    }
    dwx_sum_.assign(wx_.size(), 0.f);
    dwh_sum_.assign(wh_.size(), 0.f);
    db_sum_.assign(b_.size(), 0.f);
    dwx_.resize(wx_.size());
    dwh_.resize(wh_.size());
    db_.resize(b_.size());
    const int64_t nh = n_ * h_;
    for (size_t k = segments_.size(); k-- > 0;) {
      const int64_t t0 = segments_[k], len = segment_length(k);
      Plan& p = plan(len);
      if (!p.bwd) build_backward(p, len);
      std::unordered_map<int, memory> args = state_args(p, k, x + t0 * n_ * i_, y_.data() + t0 * nh);
      args[DNNL_ARG_WEIGHTS_LAYER] = p.bwx.read(stream(), wx_.data());
      args[DNNL_ARG_WEIGHTS_ITER] = p.bwh.read(stream(), wh_.data());
      args[DNNL_ARG_WORKSPACE] = workspaces_[k];
      args[DNNL_ARG_DIFF_DST_LAYER] = plain(p.seq(len, h_), dy ? dy + t0 * nh : zeros_.data());
      args[DNNL_ARG_DIFF_DST_ITER] = plain(p.state, dh_.data());
      args[DNNL_ARG_DIFF_DST_ITER_C] = plain(p.state, dc_.data());
      args[DNNL_ARG_DIFF_SRC_LAYER] = plain(p.seq(len, i_), (dx ? dx : dx_.data()) + t0 * n_ * i_);
      args[DNNL_ARG_DIFF_SRC_ITER] = plain(p.state, dh_in_.data());
      args[DNNL_ARG_DIFF_SRC_ITER_C] = plain(p.state, dc_in_.data());
      // Each segment's weight gradients start from zero (the primitive adds to them) and
      // are summed here in Caffe's layout.
      args[DNNL_ARG_DIFF_WEIGHTS_LAYER] = zeroed(p.dwx.write(dwx_.data()));
      args[DNNL_ARG_DIFF_WEIGHTS_ITER] = zeroed(p.dwh.write(dwh_.data()));
      args[DNNL_ARG_DIFF_BIAS] = zeroed(plain(p.bias, db_.data()));
      p.bwd.execute(stream(), args);
      p.dwx.commit(stream());
      p.dwh.commit(stream());
      swap_gate_blocks(dwx_.data(), dwx_sum_.data(), h_ * i_, true);
      swap_gate_blocks(dwh_.data(), dwh_sum_.data(), h_ * h_, true);
      swap_gate_blocks(db_.data(), db_sum_.data(), h_, true);
      // What reaches the state before the segment: its gradient times cont at its start.
      times_cont(t0, cont, dh_in_.data(), dh_.data());
      times_cont(t0, cont, dc_in_.data(), dc_.data());
    }
    if (float* d = initial_state_grad(c, 0)) std::copy(dh_.begin(), dh_.end(), d);
    if (float* d = initial_state_grad(c, 1)) std::copy(dc_.begin(), dc_.end(), d);
    if (c.param_grad[0]) std::copy(dwx_sum_.begin(), dwx_sum_.end(), c.param_grad[0]->f32());
    if (c.param_grad[1]) std::copy(db_sum_.begin(), db_sum_.end(), c.param_grad[1]->f32());
    if (c.param_grad[w_h()]) std::copy(dwh_sum_.begin(), dwh_sum_.end(), c.param_grad[w_h()]->f32());
  }

 private:
  // One segment length's primitives and weight conversions.
  struct Plan {
    memory::desc state, bias, wx_user, wh_user;
    memory::desc seq(int64_t len, int64_t width) const { return memory::desc({len, n, width}, dt::f32, tag::tnc); }
    int64_t n = 0;
    dnnl::lstm_forward::primitive_desc fwd_pd;
    DnnlPrimitive fwd, bwd;
    DnnlOperand wx, wh;    // forward weights, from Caffe's layout (gates swapped)
    DnnlOperand bwx, bwh;  // backward's weights
    DnnlOperand dwx, dwh;  // weight gradients, back to the swapped Caffe layout
  };

  dnnl::engine& engine() { return static_cast<CpuBackend&>(backend_).engine(); }
  dnnl::stream& stream() { return static_cast<CpuBackend&>(backend_).stream(); }
  memory plain(const memory::desc& d, const float* p) { return memory(d, engine(), const_cast<float*>(p)); }
  static memory zeroed(memory m) {
    std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
    return m;
  }
  int64_t segment_length(size_t k) const { return (k + 1 < segments_.size() ? segments_[k + 1] : t_) - segments_[k]; }

  // A segment starts at t = 0 and at every later step where some stream's cont is not 1.
  void cut_segments(const float* cont) {
    segments_.assign(1, 0);
    for (int64_t t = 1; t < t_; ++t)
      for (int64_t n = 0; n < n_; ++n)
        if (cont[t * n_ + n] != 1.f) {
          segments_.push_back(t);
          break;
        }
  }

  // The parameters in oneDNN's gate order, in the user layouts the plans convert from.
  void convert_params(const OpCall& c) {
    if (constant_params_ && converted_) return;
    swap_gate_blocks(c.params[0]->f32(), wx_.data(), h_ * i_);
    swap_gate_blocks(c.params[w_h()]->f32(), wh_.data(), h_ * h_);
    swap_gate_blocks(c.params[1]->f32(), b_.data(), h_);
    converted_ = true;
  }

  // The arguments forward and backward share for segment k.
  std::unordered_map<int, memory> state_args(Plan& p, size_t k, const float* x, float* y) {
    const int64_t nh = n_ * h_, len = segment_length(k);
    return {{DNNL_ARG_SRC_LAYER, plain(p.seq(len, i_), x)},
            {DNNL_ARG_SRC_ITER, plain(p.state, h0_.data() + k * nh)},
            {DNNL_ARG_SRC_ITER_C, plain(p.state, c0_.data() + k * nh)},
            {DNNL_ARG_BIAS, plain(p.bias, b_.data())},
            {DNNL_ARG_DST_LAYER, plain(p.seq(len, h_), y)},
            {DNNL_ARG_DST_ITER, plain(p.state, ht_.data() + k * nh)},
            {DNNL_ARG_DST_ITER_C, plain(p.state, ct_.data() + k * nh)}};
  }

  Plan& plan(int64_t len) {
    auto found = plans_.find(len);
    if (found != plans_.end()) return found->second;
    Plan& p = plans_[len];
    p.n = n_;
    p.state = memory::desc({1, 1, n_, h_}, dt::f32, tag::ldnc);
    p.bias = memory::desc({1, 1, 4, h_}, dt::f32, tag::ldgo);
    p.wx_user = memory::desc({1, 1, i_, 4, h_}, dt::f32, tag::ldgoi);
    p.wh_user = memory::desc({1, 1, h_, 4, h_}, dt::f32, tag::ldgoi);
    const memory::desc any_wx({1, 1, i_, 4, h_}, dt::f32, tag::any), any_wh({1, 1, h_, 4, h_}, dt::f32, tag::any);
    const auto prop = phase_ == proto::TRAIN ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    dnnl::lstm_forward::desc d(prop, dnnl::rnn_direction::unidirectional_left2right, p.seq(len, i_), p.state, p.state,
                               any_wx, any_wh, p.bias, p.seq(len, h_), p.state, p.state);
    p.fwd_pd = dnnl::lstm_forward::primitive_desc(d, user_scratchpad(), engine());
    p.fwd = DnnlPrimitive(dnnl::lstm_forward(p.fwd_pd), p.fwd_pd);
    p.wx.init(engine(), p.wx_user, p.fwd_pd.weights_layer_desc());
    p.wh.init(engine(), p.wh_user, p.fwd_pd.weights_iter_desc());
    return p;
  }

  void build_backward(Plan& p, int64_t len) {
    const memory::desc any_wx({1, 1, i_, 4, h_}, dt::f32, tag::any), any_wh({1, 1, h_, 4, h_}, dt::f32, tag::any);
    dnnl::lstm_backward::desc d(dnnl::prop_kind::backward, dnnl::rnn_direction::unidirectional_left2right,
                                p.seq(len, i_), p.state, p.state, any_wx, any_wh, p.bias, p.seq(len, h_), p.state,
                                p.state, p.seq(len, i_), p.state, p.state, any_wx, any_wh, p.bias, p.seq(len, h_),
                                p.state, p.state);
    dnnl::lstm_backward::primitive_desc pd(d, user_scratchpad(), engine(), p.fwd_pd);
    p.bwd = DnnlPrimitive(dnnl::lstm_backward(pd), pd);
    p.bwx.init(engine(), p.wx_user, pd.weights_layer_desc());
    p.bwh.init(engine(), p.wh_user, pd.weights_iter_desc());
    p.dwx.init(engine(), p.wx_user, pd.diff_weights_layer_desc());
    p.dwh.init(engine(), p.wh_user, pd.diff_weights_iter_desc());
  }

  std::map<int64_t, Plan> plans_;
  std::vector<memory> workspaces_;  // one per segment of the last training forward
  std::vector<int64_t> segments_;   // first timestep of each
  bool converted_ = false;
  // y_: the outputs (backward reads them; a later in-place layer may overwrite the top).
  // h0_/c0_: each segment's initial state; ht_/ct_: its final one.
  std::vector<float> y_, h0_, c0_, ht_, ct_, wx_, wh_, b_;
  std::vector<float> dh_, dc_, dh_in_, dc_in_, zeros_, dx_, dwx_, dwh_, db_, dwx_sum_, dwh_sum_, db_sum_;
};

}  // namespace

BKS_REGISTER_KERNEL("LSTM", ::bks::DeviceKind::cpu, LstmRnnPrimitive, "oneDNN LSTM", 5, without_static_input);

}  // namespace bks
