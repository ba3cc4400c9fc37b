// What Caffe's recurrent layers (RNN, LSTM) and bakusoku's GRU share: recurrent_param, the
// blob layout, shape inference, and a kernel base that owns the geometry, the GEMMs, the
// hidden state carried between batches and the input projection with its gradients.
//
// Layout, as Caffe's RecurrentLayer: bottoms x (T, N, ...), cont (T, N), optionally a static
// input (N, ...) seen at every timestep, and with expose_hidden the initial states (1, N, H)
// (LSTM: h_0 then c_0); tops the outputs (T, N, H) and with expose_hidden the final states.
// cont_t = 0 starts a new sequence in stream n at timestep t: the state it would carry in
// is multiplied by cont_t. Without expose_hidden, the final state of one forward is the
// initial state of the next (truncated backpropagation through time: no gradient crosses
// batches). With expose_hidden, gradients flow from the final-state tops into the
// initial-state bottoms (Caffe drops both; see docs/caffe-compatibility.md).
//
// Parameters, in Caffe's order: W_x (G*H, I) and its bias (G*H), then W_static (G*H, S) when
// there is a static input, then W_h (G*H, H), then what the cell adds (RNN's output layer,
// GRU's recurrent bias). G is the cell's number of gate blocks (LSTM 4, GRU 3, RNN 1).
#pragma once

#include <cmath>
#include <vector>

#include "ops/fixed_gemms.h"
#include "ops/op.h"
#include "ops/vector_math.h"

namespace bks {

struct RecurrentAttrs final : AttrsOf<RecurrentAttrs> {
  int64_t num_output = 0;
  FillerSpec weight_filler, bias_filler;
  bool debug_info = false;
  bool expose_hidden = false;
  void visit(AttrVisitor& v) override;
};

// One recurrent cell type's shape of things.
struct CellSpec {
  int gates;                    // gate blocks of H rows in W_x and W_h
  int states;                   // recurrent state blobs (LSTM: h and c)
  bool recurrent_bias = false;  // R = HC W_h^T + b_h, b_h the parameter after W_h (GRU)
};

// Whether a recurrent layer with these inputs has a static input (the one after cont).
bool has_static_input(const RecurrentAttrs& a, const CellSpec& cell, size_t inputs);

// The definition every recurrent type shares; the cell adds parameters after W_h.
class RecurrentDef : public OpDef {
 public:
  explicit RecurrentDef(CellSpec cell) : cell_(cell) {}
  int min_inputs(const OpContext& c) const override;
  int max_inputs(const OpContext& c) const override { return min_inputs(c) + 1; }
  int min_outputs(const OpContext& c) const override;
  void check(const OpContext& c) const override;
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override;
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override;
  OpFacts facts(const OpContext& c, const std::vector<Shape>& in) const override;

 protected:
  // Parameters after W_h (none by default).
  virtual void extra_params(const RecurrentAttrs& a, std::vector<ParamDecl>& p) const {}
  CellSpec cell_;
};

inline float logistic(float x) { return logistic_vec(x); }

// One LSTM step on one element, as LSTM repeats it and LSTMUnit computes it once: the gates
// from their pre-activations, c = cont f c_prev + i g, h = o tanh(c).
struct LstmGates {
  float i, f, o, g;
};
inline LstmGates lstm_gates(float i, float f, float o, float g) {
  return {logistic(i), logistic(f), logistic(o), tanh_vec(g)};
}
inline float lstm_cell(const LstmGates& a, float cont, float c_prev) { return cont * a.f * c_prev + a.i * a.g; }
// Its backward, from the gradients reaching c and h: the four pre-activations' and c_prev's.
struct LstmStepGrad {
  float i, f, o, g, c_prev;
};
inline LstmStepGrad lstm_step_grad(const LstmGates& a, float cont, float c_prev, float c, float dc, float dh) {
  const float tc = tanh_vec(c);
  const float dcell = dc + dh * a.o * (1.f - tc * tc);
  return {dcell * a.g * a.i * (1.f - a.i), dcell * cont * c_prev * a.f * (1.f - a.f), dh * tc * a.o * (1.f - a.o),
          dcell * a.i * (1.f - a.g * a.g), dcell * cont * a.f};
}

class RecurrentKernel : public Kernel {
 public:
  RecurrentKernel(const OpInit& i, CellSpec cell, bool fast);
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override;
  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override;
  std::string kernel_name() const override { return fast_ ? "oneDNN matmul" : "loops"; }
  // State k as the last forward left it for the next (without expose_hidden): what a kernel
  // that hands some batches to another copies across, so the sequence carries on.
  std::vector<float>& carried_state(int k) { return carry_[static_cast<size_t>(k)]; }

 protected:
  // What reshape() sets before it sizes the gate buffers: T, N, the widths, whether there is
  // a static input, and the carried states (zero for a new stream count). Kernels that keep
  // no gate buffers of their own call only this.
  void set_geometry(const std::vector<Shape>& in);
  // The cell's own GEMMs, defined when shapes are known (after the shared ones).
  virtual void add_gemms() {}
  // G (T*N, gates*H) = x W_x^T + b (+ W_static x_static at every timestep).
  void project_inputs(OpCall& c);
  // From dG (T*N, gates*H): the gradients of W_x, b, W_static, x and the static input.
  void project_input_grads(OpCall& c);
  // The initial state k (N*H floats): the exposed bottom, or what the last forward left.
  const float* initial_state(const OpCall& c, int k) const;
  // Keeps (or, with expose_hidden, outputs) the final state k.
  void final_state(OpCall& c, int k, const float* s);
  // Output k's gradient at the final state (exposed and needed), else null.
  const float* final_state_grad(const OpCall& c, int k) const;
  float* initial_state_grad(OpCall& c, int k) const;
  // dW_h = dR^T HC over every timestep (and db_h = the sum of dR with a recurrent bias).
  void recurrent_weight_grads(OpCall& c, const float* dr);
  void gemm(int id, const float* a, const float* b, float* out, const float* bias = nullptr);
  // to (N, H) = cont_t x from, per stream: the state that carries into timestep t (forward),
  // and the gradient that carries back out of it (backward).
  void times_cont(int64_t t, const float* cont, const float* from, float* to) const;
  int w_h() const { return 2 + (static_ ? 1 : 0); }  // W_h's parameter index
  float* row(std::vector<float>& v, int64_t t, int64_t width) { return v.data() + t * n_ * width; }

  RecurrentAttrs a_;
  CellSpec cell_;
  bool fast_;
  bool static_ = false;
  int64_t t_ = 0, n_ = 0, i_ = 0, s_ = 0, h_ = 0, gh_ = 0;
  std::vector<float> g_;   // (T, N, gates*H): the inputs' share of the gate pre-activations
  std::vector<float> dg_;  // their gradients
  std::vector<float> hc_;  // (T, N, H): each step's incoming h, times cont_t
  FixedGemms gemms_;
  // Shared GEMM ids; the recurrent one is per timestep: R (N, gates*H) = HC W_h^T, and
  // back, dHC (N, H) = dG_t W_h, then dW_h (gates*H, H) = dG^T HC over every timestep.
  int g_x_ = -1, g_s_ = -1, g_h_ = -1, g_dhc_ = -1, g_dwh_ = -1, g_dwx_ = -1, g_dx_ = -1, g_dws_ = -1, g_dxs_ = -1;

 private:
  std::vector<std::vector<float>> carry_;  // states kept between forwards
  std::vector<float> gs_, dgs_;            // the static input's projection, its gradient
};

// A cell's kernel class K built with its GEMMs as loops (the reference) or on oneDNN, as the
// kernel registry constructs kernels: from the OpInit alone.
template <class K, bool Fast>
class RecurrentKernelOf final : public K {
 public:
  explicit RecurrentKernelOf(const OpInit& i) : K(i, Fast) {}
};

}  // namespace bks
