// Net: the executor. Runs a Graph for one phase on one backend, following a Plan.
//
// At construction it instantiates each node's op, infers shapes, creates or looks up the
// parameter blobs, asks the planner (runtime/plan.h) for a Plan (gradients, layouts,
// shared buffers, arena offsets), binds the buffers and builds every kernel. forward() and
// backward() then run with no allocation. Gradients are summed here, not in ops: a value
// read by several nodes, a parameter shared by several layers, or accumulated over
// iter_size micro-batches.
//
// One exception to fixed shapes: an op whose output batch depends on the data (Filter).
// Before it runs, forward() asks its kernel for the batch, reshapes its outputs and every
// value they reach (inside the buffers planned for the largest batch), and calls reshape()
// and prepare() again on the nodes that read them, as Caffe reshapes a net on every
// forward. A node reading an empty batch does not run.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/param_store.h"
#include "ops/op.h"
#include "profile/profiler.h"
#include "runtime/arena.h"
#include "runtime/plan.h"

namespace bks {

struct NetOptions {
  bool force_backward = false;  // compute every gradient (Caffe's force_backward)
  // Give values with disjoint lifetimes the same memory (in `arena`, which nets that never
  // run at the same time may share). When false, every value keeps its own buffer, so
  // intermediate values can be inspected after a pass.
  bool reuse_buffers = true;
  std::shared_ptr<Arena> arena;  // null: the net makes its own
  // Parameters are fixed once the first forward runs (inference): kernels may convert
  // weights to their own layouts once instead of on every call.
  bool constant_params = false;
  // Inference on AVX-512: convolutions write oneDNN's 16-channel blocks instead of
  // channels-last (deploy times both for a bundle and saves the faster; session.h).
  bool blocked_activations = false;
  // Data-parallel training with --sync-bn: batch statistics summed over ranks (OpInit).
  CrossRankSum batch_stats_sum;
};

class Net {
 public:
  Net(Graph graph, Phase phase, ParamStore& store, Backend& backend, uint64_t seed, NetOptions options = {});
  ~Net();

  // Runs every node; returns the weighted sum of the loss outputs.
  float forward(int64_t step = 0);
  // Gradients of the loss with respect to every learnable parameter (summed into the store).
  void backward();

  const Graph& graph() const { return graph_; }
  Phase phase() const { return phase_; }
  Tensor& value(int v) { return data_[v]; }
  // Value v's data where the CPU can read it: the value itself on a CPU backend, a copy of
  // it on a GPU one.
  Tensor host_value(int v);
  // Whether the backend is a GPU (values, gradients and the kernels' parameters live there;
  // the store's parameters stay on the CPU, see device_params_).
  bool on_device() const { return backend_.device().kind != DeviceKind::cpu; }
  Tensor& value(const std::string& name);
  Tensor& grad(int v) { return grad_[v]; }
  const Plan& plan() const { return plan_; }
  bool has_grad(int v) const { return grad_[v].defined(); }
  // Values nobody consumes (loss, accuracy, ...), in graph order. With reuse_buffers these
  // (and Input blobs) are the only values whose contents survive a whole pass.
  const std::vector<int>& outputs() const { return plan_.outputs; }
  // Values produced by Input layers, to be filled by the caller.
  std::vector<int> inputs() const;
  float loss_weight(int v) const { return plan_.grad.loss_weight[v]; }
  ParamStore& store() { return store_; }
  // Store indices of the parameters this net's nodes use, each once, in graph order.
  const std::vector<int>& param_indices() const { return param_indices_; }
  // Store index of node n's i-th parameter blob (shared blobs resolved).
  int param_index(int node, int i) const { return node_params_.at(node).at(i); }
  Kernel& op(int node) { return *kernels_[node]; }
  int num_nodes() const { return static_cast<int>(kernels_.size()); }
  bool node_runs_backward(int node) const { return plan_.grad.runs_backward[node]; }

  // Called with a store index once that parameter's gradient for this backward pass is
  // complete (all its layers are done): the hook for overlapping allreduce with backward.
  void set_grad_ready_hook(std::function<void(int)> hook) { grad_ready_ = std::move(hook); }
  // Store indices in the order backward calls that hook (the same for every net built from
  // the same graph: data-parallel ranks lay out their gradient buckets by it).
  std::vector<int> grad_ready_order() const;
  // Called with a node's index after its forward ran (train --teacher runs the teacher once
  // the student's batch is in).
  void set_forward_hook(std::function<void(int)> hook) { forward_hook_ = std::move(hook); }
  void set_profiler(Profiler* p) { profiler_ = p; }
  // Batch size and dataset size of the net's first data layer; without one, the batch of
  // its first Input blob and dataset size 0.
  std::pair<int64_t, int64_t> data_extent() const;
  // What the items of data_extent's batch are ("images", "characters").
  std::string data_unit() const;
  // A row-major f32 copy of value v (or of its gradient), whatever layout it is kept in.
  // An int8 value comes back as its integer levels (its scale is its producer's).
  Tensor plain_copy(int v, bool gradient = false);
  // The element type value v is kept in: f32, or s8/u8 between int8 layers.
  DType value_dtype(int v) const;
  // Bytes of arena memory this net's plan needs (activations, gradients, scratch).
  size_t planned_bytes() const { return plan_.memory.arena_bytes; }
  // Whether value v is in a blocked oneDNN layout (then value(v) is not row-major).
  bool is_blocked(int v) const { return plan_.is_blocked(v); }
  // One line per node: shapes, kernel, in-place decisions.
  std::string describe() const;
  // How node n's output shares a buffer, for describe(): " in-place", " written into X"
  // (a Concat's run), " added onto X" (OpFacts::output_adds_onto_input), or "".
  std::string buffer_note(int n) const;
  // Whether the plan put node n's output in the buffer of the input its kernel adds onto
  // (Kernel::output_adds_onto_input).
  bool output_added_onto_input(int n) const;

  // Caffe's debug_info (runtime/net_debug_info.cc): when on, forward logs the mean |x| of
  // each node's tops and parameters after it runs, backward that of each gradient it wrote
  // (bottoms, parameters) and the net's parameter norms, one line each, as Caffe's
  // Net::ForwardDebugInfo/BackwardDebugInfo do. Off, it costs one branch per node.
  void set_debug_info(bool on);
  bool debug_info() const { return debug_info_; }
  // Caffe's UpdateDebugInfo: each parameter's mean |data| and |diff| (after a solver step).
  void update_debug_info();

 private:
  // The first data layer with outputs (its kernel counts a dataset), or -1.
  int first_data_layer() const;
  void create_ops(uint64_t seed);
  OpContext context(int n) const;
  void infer_shapes();
  void bind_params(uint64_t seed);
  std::vector<OpFacts> op_facts() const;
  PreferredLayout preferred_layout();
  void apply_plan();  // layouts into the ops, buffers into the arena, kernels built
  void prepare_kernel(int n);
  void bind_to_arena();
  void follow_data_batch(int n);
  void skipped_backward(int n);
  void forward_debug_info(int n);
  void backward_debug_info(int n);
  void backward_norms_debug_info();
  std::string param_display_name(int n, int i) const;

  Graph graph_;
  Phase phase_;
  ParamStore& store_;
  Backend& backend_;
  NetOptions options_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<const OpDef*> defs_;
  std::vector<OpFacts> facts_;
  Plan plan_;
  std::vector<Tensor> data_, grad_, scratch_;
  std::vector<int> param_indices_;
  std::vector<std::vector<int>> node_params_;  // store index per node param slot
  std::vector<OpCall> calls_;
  // Where a batch comes from the data (Filter; see follow_data_batch): per value, the bytes
  // planned for it, which no later shape may exceed; per node, whether it reads an empty
  // batch and so does not run (its outputs read as zeros, its gradients as none).
  std::vector<size_t> planned_value_bytes_;
  std::vector<bool> skipped_;
  std::function<void(int)> grad_ready_, forward_hook_;
  // On a GPU backend the parameter store stays on the CPU (solvers, snapshots, pruning and
  // allreduce work there unchanged) and the kernels get device copies: uploaded before each
  // forward, parameters the forward changes (BatchNorm's statistics) downloaded after it,
  // and each gradient downloaded into the store as soon as it is complete in backward.
  struct DeviceParam {
    Tensor data, grad, scratch;
    bool written = false;  // grad holds this pass's sum
  };
  std::map<int, DeviceParam> device_params_;  // by store index
  void upload_params();
  void download_changed_params();
  void download_grad(int idx);
  Profiler* profiler_ = nullptr;
  bool debug_info_ = false;
};

}  // namespace bks
