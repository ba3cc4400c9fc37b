#include "ops/rnn_primitive.h"

#include <cstring>

namespace bks {

using tag = memory::format_tag;
using dt = memory::data_type;

namespace {
memory zeroed(memory m) {
  std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
  return m;
}
}  // namespace

bool rnn_primitive_supports(const OpInit& i, const CellSpec& cell) {
  return !has_static_input(i.node.attrs.as<RecurrentAttrs>(), cell, i.node.inputs.size());
}

void permute_gates(const float* from, float* to, int64_t block, const std::vector<int64_t>& order, bool add) {
  for (size_t g = 0; g < order.size(); ++g) {
    const float* f = from + order[g] * block;
    float* t = to + static_cast<int64_t>(g) * block;
    if (add)
      for (int64_t j = 0; j < block; ++j) t[j] += f[j];
    else
      std::memcpy(t, f, static_cast<size_t>(block) * sizeof(float));
  }
}

RnnPrimitiveKernel::RnnPrimitiveKernel(const OpInit& i, CellSpec cell, int bias_blocks)
    : RecurrentKernel(i, cell, true), bias_blocks_(bias_blocks) {
  for (const KernelRegistry::Entry* e : KernelRegistry::get().entries(i.node.type))
    if (e->device == DeviceKind::cpu && e->name == "oneDNN") steps_ = e->make(i);
  BKS_CHECK(steps_ != nullptr, "{}: no matmul kernel of {} to hand many-segment batches to", where_, i.node.type);
}

void RnnPrimitiveKernel::reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  steps_->reshape(in, out);
  set_geometry(in);
  converted_ = false;
  check_shape({t_, n_, h_}, sizeof(float), where_ + ": the outputs kept for backward");
  const auto nh = static_cast<size_t>(n_ * h_);
  y_.assign(static_cast<size_t>(t_) * nh, 0.f);
  // A segment starts at most at every step; the cell state only for LSTM.
  const size_t cells = cell_.states > 1 ? y_.size() : 0;
  h0_.assign(y_.size(), 0.f);
  ht_.assign(y_.size(), 0.f);
  c0_.assign(cells, 0.f);
  ct_.assign(cells, 0.f);
  wx_.assign(static_cast<size_t>(gh_ * i_), 0.f);
  wh_.assign(static_cast<size_t>(gh_ * h_), 0.f);
  b_.assign(static_cast<size_t>(bias_blocks_ * h_), 0.f);
  dh_.assign(nh, 0.f);
  dh_in_.assign(nh, 0.f);
  dc_.assign(cell_.states > 1 ? nh : 0, 0.f);
  dc_in_.assign(dc_.size(), 0.f);
}

void RnnPrimitiveKernel::prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) {
  steps_->prepare(in, out);
  plans_.clear();
  workspaces_.clear();
  plan(t_);  // the usual single segment; others are built the first time they occur
}

int64_t RnnPrimitiveKernel::segment_length(size_t k) const {
  return (k + 1 < segments_.size() ? segments_[k + 1] : t_) - segments_[k];
}

void RnnPrimitiveKernel::cut_segments(const float* cont) {
  segments_.assign(1, 0);
  for (int64_t t = 1; t < t_; ++t)
    for (int64_t n = 0; n < n_; ++n)
      if (cont[t * n_ + n] != 1.f) {
        segments_.push_back(t);
        break;
      }
}

RnnPrimitiveKernel::Plan& RnnPrimitiveKernel::plan(int64_t len) {
  auto found = plans_.find(len);
  if (found != plans_.end()) return found->second;
  Plan& p = plans_[len];
  const int64_t gates = cell_.gates;
  p.state = memory::desc({1, 1, n_, h_}, dt::f32, tag::ldnc);
  p.bias = memory::desc({1, 1, bias_blocks_, h_}, dt::f32, tag::ldgo);
  p.wx_user = memory::desc({1, 1, i_, gates, h_}, dt::f32, tag::ldgoi);
  p.wh_user = memory::desc({1, 1, h_, gates, h_}, dt::f32, tag::ldgoi);
  p.x_seq = memory::desc({len, n_, i_}, dt::f32, tag::tnc);
  p.y_seq = memory::desc({len, n_, h_}, dt::f32, tag::tnc);
  build(p, memory::desc({1, 1, i_, gates, h_}, dt::f32, tag::any),
        memory::desc({1, 1, h_, gates, h_}, dt::f32, tag::any));
  p.wx.init(engine(), p.wx_user, p.fwd_pd.weights_layer_desc());
  p.wh.init(engine(), p.wh_user, p.fwd_pd.weights_iter_desc());
  if (p.bwd) {
    p.bwx.init(engine(), p.wx_user, p.bwd_pd.weights_layer_desc());
    p.bwh.init(engine(), p.wh_user, p.bwd_pd.weights_iter_desc());
    p.dwx.init(engine(), p.wx_user, p.bwd_pd.diff_weights_layer_desc());
    p.dwh.init(engine(), p.wh_user, p.bwd_pd.diff_weights_iter_desc());
  }
  return p;
}

// The arguments forward and backward share for segment k.
std::unordered_map<int, memory> RnnPrimitiveKernel::state_args(Plan& p, size_t k, const float* x) {
  const int64_t nh = n_ * h_, t0 = segments_[k];
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC_LAYER, plain(p.x_seq, x + t0 * n_ * i_)},
                                       {DNNL_ARG_SRC_ITER, plain(p.state, h0_.data() + k * nh)},
                                       {DNNL_ARG_BIAS, plain(p.bias, b_.data())},
                                       {DNNL_ARG_DST_LAYER, plain(p.y_seq, y_.data() + t0 * nh)},
                                       {DNNL_ARG_DST_ITER, plain(p.state, ht_.data() + k * nh)}};
  if (cell_.states > 1) {
    args[DNNL_ARG_SRC_ITER_C] = plain(p.state, c0_.data() + k * nh);
    args[DNNL_ARG_DST_ITER_C] = plain(p.state, ct_.data() + k * nh);
  }
  return args;
}

void RnnPrimitiveKernel::forward(OpCall& c) {
  const float* cont = c.in[1]->f32();
  cut_segments(cont);
  stepped_ = segments_.size() > kMaxPrimitiveSegments;
  if (stepped_) {
    // The matmul kernel carries on from this kernel's state, and hands it back.
    auto& steps = static_cast<RecurrentKernel&>(*steps_);
    for (int k = 0; k < cell_.states; ++k) steps.carried_state(k) = carried_state(k);
    steps_->forward(c);
    for (int k = 0; k < cell_.states; ++k) carried_state(k) = steps.carried_state(k);
    return;
  }
  if (!(constant_params_ && converted_)) {
    to_primitive(c, wx_.data(), wh_.data(), b_.data());
    converted_ = true;
  }
  const bool lstm = cell_.states > 1;
  const float* h = initial_state(c, 0);
  const float* cs = lstm ? initial_state(c, 1) : nullptr;
  const int64_t nh = n_ * h_;
  if (phase_ == proto::TRAIN) workspaces_.resize(segments_.size());
  for (size_t k = 0; k < segments_.size(); ++k) {
    const int64_t t0 = segments_[k];
    Plan& p = plan(segment_length(k));
    times_cont(t0, cont, h, h0_.data() + k * nh);
    if (lstm) times_cont(t0, cont, cs, c0_.data() + k * nh);
    std::unordered_map<int, memory> args = state_args(p, k, c.in[0]->f32());
    const bool fixed = constant_params_ && phase_ != proto::TRAIN;
    args[DNNL_ARG_WEIGHTS_LAYER] = fixed ? p.wx.read_constant(stream(), wx_.data()) : p.wx.read(stream(), wx_.data());
    args[DNNL_ARG_WEIGHTS_ITER] = fixed ? p.wh.read_constant(stream(), wh_.data()) : p.wh.read(stream(), wh_.data());
    if (phase_ == proto::TRAIN) {
      if (!workspaces_[k] || workspaces_[k].get_desc() != p.fwd_pd.workspace_desc())
        workspaces_[k] = memory(p.fwd_pd.workspace_desc(), engine());
      args[DNNL_ARG_WORKSPACE] = workspaces_[k];
    }
    p.fwd.execute(stream(), args);
    h = ht_.data() + k * nh;
    if (lstm) cs = ct_.data() + k * nh;
  }
  write_outputs(c, y_.data());
  final_state(c, 0, h);
  if (lstm) final_state(c, 1, cs);
}

void RnnPrimitiveKernel::write_outputs(OpCall& c, const float* h) {
  std::memcpy(c.out[0]->f32(), h, static_cast<size_t>(t_ * n_ * h_) * sizeof(float));
}

void RnnPrimitiveKernel::backward(OpCall& c) {
  if (stepped_) return steps_->backward(c);
  const float* cont = c.in[1]->f32();
  const float* dy = grad_reaching_h(c, c.out_grad[0] ? c.out_grad[0]->f32() : nullptr);
  float* dx = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr;
  if (!dy) zeros_.assign(y_.size(), 0.f);
  if (!dx) dx_.resize(static_cast<size_t>(t_ * n_ * i_));
  const bool lstm = cell_.states > 1;
  const float* dh_end = final_state_grad(c, 0);
  const float* dc_end = lstm ? final_state_grad(c, 1) : nullptr;
  for (size_t j = 0; j < dh_.size(); ++j) dh_[j] = dh_end ? dh_end[j] : 0.f;
  for (size_t j = 0; j < dc_.size(); ++j) dc_[j] = dc_end ? dc_end[j] : 0.f;
  grads_.assign(c.params.size(), {});
  dwx_.resize(wx_.size());
  dwh_.resize(wh_.size());
  db_.resize(b_.size());
  const int64_t nh = n_ * h_;
  for (size_t k = segments_.size(); k-- > 0;) {
    const int64_t t0 = segments_[k];
    Plan& p = plan(segment_length(k));
    std::unordered_map<int, memory> args = state_args(p, k, c.in[0]->f32());
    args[DNNL_ARG_WEIGHTS_LAYER] = p.bwx.read(stream(), wx_.data());
    args[DNNL_ARG_WEIGHTS_ITER] = p.bwh.read(stream(), wh_.data());
    args[DNNL_ARG_WORKSPACE] = workspaces_[k];
    args[DNNL_ARG_DIFF_DST_LAYER] = plain(p.y_seq, dy ? dy + t0 * nh : zeros_.data());
    args[DNNL_ARG_DIFF_DST_ITER] = plain(p.state, dh_.data());
    args[DNNL_ARG_DIFF_SRC_LAYER] = plain(p.x_seq, (dx ? dx : dx_.data()) + t0 * n_ * i_);
    args[DNNL_ARG_DIFF_SRC_ITER] = plain(p.state, dh_in_.data());
    if (lstm) {
      args[DNNL_ARG_DIFF_DST_ITER_C] = plain(p.state, dc_.data());
      args[DNNL_ARG_DIFF_SRC_ITER_C] = plain(p.state, dc_in_.data());
    }
    // Each segment's weight gradients start from zero (the primitive adds to them) and
    // are summed in Caffe's layout by the cell.
    args[DNNL_ARG_DIFF_WEIGHTS_LAYER] = zeroed(p.dwx.write(dwx_.data()));
    args[DNNL_ARG_DIFF_WEIGHTS_ITER] = zeroed(p.dwh.write(dwh_.data()));
    args[DNNL_ARG_DIFF_BIAS] = zeroed(plain(p.bias, db_.data()));
    p.bwd.execute(stream(), args);
    p.dwx.commit(stream());
    p.dwh.commit(stream());
    add_grads(dwx_.data(), dwh_.data(), db_.data(), grads_);
    // What reaches the state before the segment: its gradient times cont at its start.
    times_cont(t0, cont, dh_in_.data(), dh_.data());
    if (lstm) times_cont(t0, cont, dc_in_.data(), dc_.data());
  }
  if (float* d = initial_state_grad(c, 0)) std::copy(dh_.begin(), dh_.end(), d);
  if (lstm)
    if (float* d = initial_state_grad(c, 1)) std::copy(dc_.begin(), dc_.end(), d);
  for (size_t k = 0; k < grads_.size(); ++k)
    if (c.param_grad[k] && !grads_[k].empty()) std::copy(grads_[k].begin(), grads_[k].end(), c.param_grad[k]->f32());
}

}  // namespace bks
