// Recurrent layers on oneDNN's RNN primitives (lstm_forward, lbr_gru_forward and their
// backward): the whole sequence, its gates and recurrence in one call. What the cells
// share is here; each cell (lstm_rnn_primitive.cc, gru_rnn_primitive.cc) converts its
// parameters to the primitive's gate order and builds the primitives.
//
// cont: the primitives have no per-step reset. cont_t scales the state carried into step t
// (recurrent.h), so time is cut into segments at every t > 0 where some stream's cont_t is
// not 1, each one primitive call whose initial state is the state so far times cont at its
// first step. The usual truncated-BPTT batch (a reset only at t = 0, or none) is one segment.
// A static input has no place in the primitives: those layers run the matmul kernel.
#pragma once

#include <map>

#include "backend/dnnl_util.h"
#include "ops/recurrent.h"

namespace bks {

// Whether a layer of this cell can run on its primitive (it has no static input).
bool rnn_primitive_supports(const OpInit& i, const CellSpec& cell);

// Block g of `to` is block order[g] of `from` (gates blocks of `block` floats), copied, or
// added with `add`: a cell's gate order to the primitive's and back.
void permute_gates(const float* from, float* to, int64_t block, const std::vector<int64_t>& order, bool add = false);

// A batch cut into more segments than this runs the type's matmul kernel instead: each
// segment is one primitive call, and many short calls lose to one GEMM per step.
constexpr size_t kMaxPrimitiveSegments = 2;

class RnnPrimitiveKernel : public RecurrentKernel {
 public:
  RnnPrimitiveKernel(const OpInit& i, CellSpec cell, int bias_blocks);
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override;
  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override;
  void forward(OpCall& c) override;
  void backward(OpCall& c) override;

 protected:
  // One segment length's primitives (the backward one only in training) and weight
  // conversions from the user layout ldgoi.
  struct Plan {
    memory::desc state, bias, wx_user, wh_user, x_seq, y_seq;
    dnnl::rnn_primitive_desc_base fwd_pd, bwd_pd;
    DnnlPrimitive fwd, bwd;
    DnnlOperand wx, wh, bwx, bwh, dwx, dwh;
  };
  // Builds p.fwd (and in training p.bwd) with p's descriptors filled in; weights `any`.
  virtual void build(Plan& p, const memory::desc& any_wx, const memory::desc& any_wh) = 0;
  // The parameters in the primitive's gate order: W_x (gates*H, I), W_h (gates*H, H) and
  // the bias (bias_blocks*H).
  virtual void to_primitive(const OpCall& c, float* wx, float* wh, float* b) const = 0;
  // Adds one segment's gradients, in the primitive's order, to the parameters' (Caffe's
  // layout): grads[k] is parameter k's sum (empty for parameters the cell does not train).
  virtual void add_grads(const float* dwx, const float* dwh, const float* db,
                         std::vector<std::vector<float>>& grads) const = 0;

  // The top from every step's h (T, N, H): h itself by default (RNN adds its output layer).
  virtual void write_outputs(OpCall& c, const float* h);
  // The gradient reaching every step's h from the top's `dy` (null: none): `dy` by default.
  // A cell with layers after h also computes their parameters' gradients here.
  virtual const float* grad_reaching_h(OpCall& c, const float* dy) { return dy; }

  dnnl::engine& engine() { return static_cast<CpuBackend&>(backend_).engine(); }
  dnnl::stream& stream() { return static_cast<CpuBackend&>(backend_).stream(); }
  int bias_blocks_;

 private:
  memory plain(const memory::desc& d, const float* p) { return memory(d, engine(), const_cast<float*>(p)); }
  int64_t segment_length(size_t k) const;
  void cut_segments(const float* cont);
  Plan& plan(int64_t len);
  std::unordered_map<int, memory> state_args(Plan& p, size_t k, const float* x);

  // The type's matmul kernel, for batches of many segments; whether the last forward used it.
  std::unique_ptr<Kernel> steps_;
  bool stepped_ = false;
  std::map<int64_t, Plan> plans_;
  std::vector<memory> workspaces_;  // one per segment of the last training forward
  std::vector<int64_t> segments_;   // first timestep of each
  bool converted_ = false;
  // y_: the outputs (backward reads them; a later in-place layer may overwrite the top).
  // h0_/c0_: each segment's initial state; ht_/ct_: its final one (c: LSTM only).
  std::vector<float> y_, h0_, c0_, ht_, ct_, wx_, wh_, b_;
  std::vector<float> dh_, dc_, dh_in_, dc_in_, zeros_, dx_, dwx_, dwh_, db_;
  std::vector<std::vector<float>> grads_;  // per parameter, summed over segments
};

}  // namespace bks
