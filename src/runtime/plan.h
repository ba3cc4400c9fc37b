// Planning a graph's execution, apart from running it.
//
// From the graph (shapes inferred) and what each node's op declares (OpFacts), pure
// functions decide: which nodes run backward and which gradients they write (and which
// must be summed), the layout of every value, which values share a buffer (in-place
// layers, views, a Concat written in place), and where in one arena each buffer lives
// (liveness, first fit). check_plan() asserts the invariants the executor relies on. The
// executor (runtime/net.h) only runs a Plan.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"
#include "ops/op_def.h"

namespace bks {

struct GradientPlan {
  std::vector<float> loss_weight;                     // per value
  std::vector<bool> has_grad;                         // per value: a gradient buffer exists
  std::vector<bool> runs_backward;                    // per node
  std::vector<std::vector<bool>> need_in_grad;        // per node, per input
  std::vector<std::vector<bool>> accumulate_in_grad;  // written second or later: into scratch, then added
  // Per node: the parameter keys (see plan_gradients) whose gradient is complete once this
  // node's backward ran (the gradient-ready hook).
  std::vector<std::vector<int>> grad_ready_after;
};

struct AliasPlan {
  std::vector<int> data_alias, grad_alias;  // per value: the value whose buffer it shares, or -1
  std::vector<size_t> data_alias_offset;    // per value: byte offset into that buffer
};

// Where each buffer lives: an offset in the arena, or its own allocation (kDedicated).
struct MemoryPlan {
  static constexpr size_t kDedicated = SIZE_MAX;
  struct Interval {
    enum class Kind : uint8_t { data, grad, scratch } kind;
    int index;  // value (data, grad) or scratch slot
    size_t bytes;
    int start, end;  // inclusive steps: node n's forward at n, its backward at 2N-1-n
  };
  std::vector<size_t> data_offset, grad_offset, scratch_offset;
  std::vector<int> scratch_value;   // per scratch slot: the value whose gradient it sums
  std::vector<Interval> intervals;  // every arena placement, for checks and reports
  size_t arena_bytes = 0;
};

struct Plan {
  GradientPlan grad;
  std::vector<bool> batch_from_data;       // per value: see plan_batch_from_data
  std::vector<dnnl::memory::desc> layout;  // per value (data and gradient); empty = plain
  AliasPlan alias;
  MemoryPlan memory;
  std::vector<int> outputs;  // values nobody consumes, in graph order

  bool is_blocked(int v) const { return layout[v].data.ndims > 0; }
  // Bytes of value v's buffer in its layout (64-byte aligned).
  size_t buffer_bytes(const Graph& g, int v) const;
  // Physical bytes of a blocked value, 0 when plain.
  size_t blocked_bytes(int v) const { return is_blocked(v) ? layout[v].get_size() : 0; }
};

// `node_learnable[n]`: node n has a parameter that takes a gradient step.
// `node_params[n]`: a key per parameter slot of node n (shared blobs share a key); the
// gradient-ready hook fires after the backward of the earliest node using each key.
GradientPlan plan_gradients(const Graph& g, const std::vector<OpFacts>& facts, bool training, bool force_backward,
                            const std::vector<std::vector<int>>& node_params);

// Per value: whether its batch is known only when the net runs: the outputs of an op with
// OpFacts::batch_from_data (Filter) and every value computed from them. Such values are
// planned at their largest (what shape inference gave), stay plain (a prefix of the buffer
// then holds any smaller batch) and are not placed inside a Concat's output; the executor
// reshapes them when the batch changes.
std::vector<bool> plan_batch_from_data(const Graph& g, const std::vector<OpFacts>& facts);

// Optimistic layouts (each op gets the layout it prefers; `preferred(n, j, in)` asks node
// n's kernel), then demotion to plain wherever a reader needs it. `plain_only` (the
// BKS_LAYOUTS=plain environment variable) turns propagation off. InputError when an int8
// value would have to become plain.
using PreferredLayout =
    std::function<dnnl::memory::desc(int node, int output, const std::vector<dnnl::memory::desc>& in)>;
std::vector<dnnl::memory::desc> plan_layouts(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                                             const std::vector<bool>& batch_from_data, const PreferredLayout& preferred,
                                             bool plain_only);

// In-place layers, views, Concats written in place, and (with reuse_buffers, as it
// overwrites a value the graph does not name in place) outputs added onto an input's buffer
// (OpFacts::output_adds_onto_input).
AliasPlan plan_aliases(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                       const std::vector<dnnl::memory::desc>& layout, const std::vector<bool>& batch_from_data,
                       bool reuse_buffers = true);

// Liveness -> arena offsets. With reuse_buffers false every buffer is dedicated (so values
// can be inspected after a pass).
MemoryPlan plan_memory(const Graph& g, const std::vector<OpFacts>& facts, const Plan& p, bool reuse_buffers);

// All of the above.
Plan make_plan(const Graph& g, const std::vector<OpFacts>& facts, bool training, bool force_backward,
               const std::vector<std::vector<int>>& node_params, const PreferredLayout& preferred, bool reuse_buffers);

// Throws RuntimeError naming the broken invariant: sizes match the graph; a gradient is
// written only by nodes that run backward, into values that have a gradient buffer, and
// summed exactly from its second writer on; alias chains end, share a layout, and are
// allowed by the ops; arena buffers that are live at the same time do not overlap.
void check_plan(const Graph& g, const std::vector<OpFacts>& facts, const Plan& p);

}  // namespace bks
