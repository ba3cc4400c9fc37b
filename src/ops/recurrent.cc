#include "ops/recurrent.h"

#include <algorithm>
#include <cstring>

namespace bks {

void RecurrentAttrs::visit(AttrVisitor& v) {
  v.field("num_output", num_output);
  v.field("weight_filler", weight_filler);
  v.field("bias_filler", bias_filler);
  v.field("debug_info", debug_info);
  v.field("expose_hidden", expose_hidden);
}

namespace {
void recurrent_from_caffe(const proto::LayerParameter& l, RecurrentAttrs& a, const std::string&) {
  const proto::RecurrentParameter& p = l.recurrent_param();
  a.num_output = p.num_output();
  a.weight_filler = filler_from_caffe(p.weight_filler());
  a.bias_filler = filler_from_caffe(p.bias_filler());
  a.debug_info = p.debug_info();
  a.expose_hidden = p.expose_hidden();
}
void recurrent_to_caffe(const RecurrentAttrs& a, proto::LayerParameter& l) {
  proto::RecurrentParameter* p = l.mutable_recurrent_param();
  p->set_num_output(static_cast<uint32_t>(a.num_output));
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
  p->set_debug_info(a.debug_info);
  p->set_expose_hidden(a.expose_hidden);
}
}  // namespace
BKS_REGISTER_ATTRS("RNN", RecurrentAttrs, recurrent_from_caffe, recurrent_to_caffe);
BKS_REGISTER_ATTRS("LSTM", RecurrentAttrs, recurrent_from_caffe, recurrent_to_caffe);
BKS_REGISTER_ATTRS("GRU", RecurrentAttrs, recurrent_from_caffe, recurrent_to_caffe);

// ---- definition ----

bool has_static_input(const RecurrentAttrs& a, const CellSpec& cell, size_t inputs) {
  return inputs - (a.expose_hidden ? static_cast<size_t>(cell.states) : 0) == 3;
}

int RecurrentDef::min_inputs(const OpContext& c) const {
  return 2 + (c.node.attrs.as<RecurrentAttrs>().expose_hidden ? cell_.states : 0);
}
int RecurrentDef::min_outputs(const OpContext& c) const {
  return 1 + (c.node.attrs.as<RecurrentAttrs>().expose_hidden ? cell_.states : 0);
}

void RecurrentDef::check(const OpContext& c) const {
  const RecurrentAttrs& a = c.node.attrs.as<RecurrentAttrs>();
  if (a.num_output <= 0) c.fail("recurrent_param.num_output must be positive, got {}", a.num_output);
}

// The static input, when given, comes right after cont (Caffe's order).
void RecurrentDef::infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const {
  const RecurrentAttrs& a = c.node.attrs.as<RecurrentAttrs>();
  if (in[0].size() < 2) c.fail("bottom 0 must be (timesteps, streams, ...), got {}", shape_str(in[0]));
  const int64_t t = in[0][0], n = in[0][1];
  if (in[1] != Shape{t, n})
    c.fail("bottom 1 (cont) must be (timesteps, streams) = ({}, {}), got {}", t, n, shape_str(in[1]));
  const size_t first_state = in.size() - (a.expose_hidden ? cell_.states : 0);
  if (has_static_input(a, cell_, in.size()) && (in[2].empty() || in[2][0] != n))
    c.fail("bottom 2 (the static input) must be ({}, ...), one item per stream, got {}", n, shape_str(in[2]));
  const Shape state{1, n, a.num_output};
  for (size_t k = first_state; k < in.size(); ++k)
    if (in[k] != state)
      c.fail("bottom {} (an initial state) must be {}, got {}", k, shape_str(state), shape_str(in[k]));
  out[0] = {t, n, a.num_output};
  for (size_t k = 1; k < out.size(); ++k) out[k] = state;
}

std::vector<ParamDecl> RecurrentDef::params(const OpContext& c, const std::vector<Shape>& in) const {
  const RecurrentAttrs& a = c.node.attrs.as<RecurrentAttrs>();
  const int64_t gh = cell_.gates * a.num_output;
  std::vector<ParamDecl> p{{{gh, shape_count(in[0], 2, static_cast<int>(in[0].size()))}, a.weight_filler, true},
                           {{gh}, a.bias_filler, true}};
  if (has_static_input(a, cell_, in.size()))
    p.push_back({{gh, shape_count(in[2], 1, static_cast<int>(in[2].size()))}, a.weight_filler, true});
  p.push_back({{gh, a.num_output}, a.weight_filler, true});
  if (cell_.recurrent_bias) p.push_back({{gh}, a.bias_filler, true});
  extra_params(a, p);
  return p;
}

// cont holds sequence flags: no gradient.
OpFacts RecurrentDef::facts(const OpContext&, const std::vector<Shape>& in) const {
  OpFacts f;
  f.can_propagate_to.assign(in.size(), true);
  f.can_propagate_to[1] = false;
  return f;
}

// ---- kernel ----

RecurrentKernel::RecurrentKernel(const OpInit& i, CellSpec cell, bool fast)
    : Kernel(i), a_(i.node.attrs.as<RecurrentAttrs>()), cell_(cell), fast_(fast) {}

void RecurrentKernel::set_geometry(const std::vector<Shape>& in) {
  static_ = has_static_input(a_, cell_, in.size());
  const int64_t n = in[0][1];
  if (n != n_ || carry_.empty()) carry_.assign(static_cast<size_t>(cell_.states), std::vector<float>());
  t_ = in[0][0];
  n_ = n;
  i_ = shape_count(in[0], 2, static_cast<int>(in[0].size()));
  s_ = static_ ? shape_count(in[2], 1, static_cast<int>(in[2].size())) : 0;
  h_ = a_.num_output;
  gh_ = cell_.gates * h_;
  // The gate buffers are gates times the output: sized against the same limit first.
  check_shape({t_, n_, gh_}, sizeof(float), where_ + ": the gate buffers");
  for (auto& s : carry_) s.resize(static_cast<size_t>(n_ * h_), 0.f);  // a new stream count starts at zero
}

void RecurrentKernel::reshape(const std::vector<Shape>& in, const std::vector<Shape>&) {
  set_geometry(in);
  g_.assign(static_cast<size_t>(t_ * n_ * gh_), 0.f);
  dg_.assign(g_.size(), 0.f);
  hc_.assign(static_cast<size_t>(t_ * n_ * h_), 0.f);
  gs_.assign(static_cast<size_t>(n_ * gh_), 0.f);
  dgs_.assign(gs_.size(), 0.f);
}

void RecurrentKernel::prepare(const std::vector<Shape>&, const std::vector<Shape>&) {
  gemms_.clear();
  const int64_t tn = t_ * n_;
  // Inference weights are packed once (the same weights in every step of every forward).
  const bool constant = constant_params_ && phase_ != proto::TRAIN;
  g_x_ = gemms_.add({'N', 'T', tn, gh_, i_, true, constant});
  g_h_ = gemms_.add({'N', 'T', n_, gh_, h_, cell_.recurrent_bias, constant});
  if (phase_ == proto::TRAIN) {
    g_dhc_ = gemms_.add({'N', 'N', n_, h_, gh_, false});
    g_dwh_ = gemms_.add({'T', 'N', gh_, h_, tn, false});
    g_dwx_ = gemms_.add({'T', 'N', gh_, i_, tn, false});
    g_dx_ = gemms_.add({'N', 'N', tn, i_, gh_, false});
  }
  if (static_) {
    g_s_ = gemms_.add({'N', 'T', n_, gh_, s_, false, constant});
    if (phase_ == proto::TRAIN) {
      g_dws_ = gemms_.add({'T', 'N', gh_, s_, n_, false});
      g_dxs_ = gemms_.add({'N', 'N', n_, s_, gh_, false});
    }
  }
  add_gemms();
  gemms_.prepare(fast_ ? &static_cast<CpuBackend&>(backend_).engine() : nullptr, fast_);
}

void RecurrentKernel::gemm(int id, const float* a, const float* b, float* out, const float* bias) {
  BKS_CHECK(id >= 0, "{}: a GEMM used before it was defined", where_);
  gemms_.run(fast_ ? &static_cast<CpuBackend&>(backend_).stream() : nullptr, id, a, b, out, bias);
}

void RecurrentKernel::times_cont(int64_t t, const float* cont, const float* from, float* to) const {
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t d = 0; d < h_; ++d) to[n * h_ + d] = cont[t * n_ + n] * from[n * h_ + d];
}

void RecurrentKernel::project_inputs(OpCall& c) {
  gemm(g_x_, c.in[0]->f32(), c.params[0]->f32(), g_.data(), c.params[1]->f32());
  if (!static_) return;
  gemm(g_s_, c.in[2]->f32(), c.params[2]->f32(), gs_.data());
  for (int64_t t = 0; t < t_; ++t) {
    float* g = row(g_, t, gh_);
    for (int64_t j = 0; j < n_ * gh_; ++j) g[j] += gs_[static_cast<size_t>(j)];
  }
}

void RecurrentKernel::project_input_grads(OpCall& c) {
  const float* dg = dg_.data();
  if (c.param_grad[0]) gemm(g_dwx_, dg, c.in[0]->f32(), c.param_grad[0]->f32());
  if (c.param_grad[1]) sum_rows(dg, t_ * n_, gh_, c.param_grad[1]->f32());
  if (c.in_grad[0]) gemm(g_dx_, dg, c.params[0]->f32(), c.in_grad[0]->f32());
  if (!static_) return;
  std::fill(dgs_.begin(), dgs_.end(), 0.f);
  for (int64_t t = 0; t < t_; ++t) {
    const float* d = dg + t * n_ * gh_;
    for (int64_t j = 0; j < n_ * gh_; ++j) dgs_[static_cast<size_t>(j)] += d[j];
  }
  if (c.param_grad[2]) gemm(g_dws_, dgs_.data(), c.in[2]->f32(), c.param_grad[2]->f32());
  if (c.in_grad[2]) gemm(g_dxs_, dgs_.data(), c.params[2]->f32(), c.in_grad[2]->f32());
}

void RecurrentKernel::recurrent_weight_grads(OpCall& c, const float* dr) {
  if (c.param_grad[w_h()]) gemm(g_dwh_, dr, hc_.data(), c.param_grad[w_h()]->f32());
  if (cell_.recurrent_bias && c.param_grad[w_h() + 1]) sum_rows(dr, t_ * n_, gh_, c.param_grad[w_h() + 1]->f32());
}

const float* RecurrentKernel::initial_state(const OpCall& c, int k) const {
  if (a_.expose_hidden) return c.in[c.in.size() - static_cast<size_t>(cell_.states - k)]->f32();
  return carry_[static_cast<size_t>(k)].data();
}

void RecurrentKernel::final_state(OpCall& c, int k, const float* s) {
  float* to = a_.expose_hidden ? c.out[static_cast<size_t>(1 + k)]->f32() : carry_[static_cast<size_t>(k)].data();
  std::memcpy(to, s, static_cast<size_t>(n_ * h_) * sizeof(float));
}

const float* RecurrentKernel::final_state_grad(const OpCall& c, int k) const {
  if (!a_.expose_hidden) return nullptr;
  const Tensor* g = c.out_grad[static_cast<size_t>(1 + k)];
  return g ? g->f32() : nullptr;
}

float* RecurrentKernel::initial_state_grad(OpCall& c, int k) const {
  if (!a_.expose_hidden) return nullptr;
  Tensor* g = c.in_grad[c.in_grad.size() - static_cast<size_t>(cell_.states - k)];
  return g ? g->f32() : nullptr;
}

}  // namespace bks
