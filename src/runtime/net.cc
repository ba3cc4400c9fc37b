#include "runtime/net.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>

#include "core/log.h"
#include "core/parallel.h"
#include "backend/dnnl_util.h"
#include "runtime/filler.h"

namespace bks {
namespace {

// Sums over the whole buffer: blocked layouts keep their padding at zero, so this is right
// for every layout.
void add_into(Tensor& dst, const Tensor& src) {
  float* d = dst.f32();
  const float* s = src.f32();
  parallel_ranges(dst.phys_numel(), [=](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) d[i] += s[i];
  });
}

// "1", "at least 1" or "1 to 3" for arity errors.
std::string arity_text(int lo, int hi) {
  if (lo == hi) return fmt::format("{}", lo);
  if (hi < 0) return fmt::format("at least {}", lo);
  return fmt::format("{} to {}", lo, hi);
}

}  // namespace

Net::Net(Graph graph, Phase phase, ParamStore& store, Backend& backend, uint64_t seed, NetOptions options)
    : graph_(std::move(graph)), phase_(phase), store_(store), backend_(backend), options_(std::move(options)) {
  if (!options_.arena) options_.arena = std::make_shared<Arena>();
  create_ops(seed);
  infer_shapes();
  bind_params(seed);
  plan_gradients(options_.force_backward);
  plan_layouts();
  plan_buffers();
  prepare_kernels();
  build_calls();
}

Net::~Net() { options_.arena->remove_user(this); }

void Net::create_ops(uint64_t seed) {
  auto& reg = OpRegistry::get();
  for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n) {
    const Node& node = graph_.nodes[n];
    OpInit init{node, graph_.describe(n), phase_, seed, backend_, options_.constant_params, options_.bf16};
    auto op = reg.create(init);
    int ni = static_cast<int>(node.inputs.size()), no = static_cast<int>(node.outputs.size());
    if (ni < op->min_inputs() || (op->max_inputs() >= 0 && ni > op->max_inputs()))
      input_error("{}: takes {} bottom blob(s), got {}", init.where, arity_text(op->min_inputs(), op->max_inputs()), ni);
    if (no < op->min_outputs() || (op->max_outputs() >= 0 && no > op->max_outputs()))
      input_error("{}: produces {} top blob(s), got {}", init.where, arity_text(op->min_outputs(), op->max_outputs()),
                  no);
    ops_.push_back(std::move(op));
  }
}

void Net::infer_shapes() {
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    std::vector<Shape> in, out(node.outputs.size());
    for (int v : node.inputs) in.push_back(graph_.values[v].shape);
    ops_[n]->infer(in, out);
    BKS_CHECK(out.size() == node.outputs.size(), "{} inferred {} outputs", node.name, out.size());
    for (size_t j = 0; j < out.size(); ++j) graph_.values[node.outputs[j]].shape = out[j];
  }
}

void Net::bind_params(uint64_t seed) {
  node_params_.resize(num_nodes());
  for (int n = 0; n < num_nodes(); ++n) {
    Node& node = graph_.nodes[n];
    std::vector<Shape> in;
    for (int v : node.inputs) in.push_back(graph_.values[v].shape);
    auto decls = ops_[n]->declare_params(in);
    if (node.param.param_size() > static_cast<int>(decls.size()))
      input_error("{}: {} 'param' specs given but the layer has {} parameter blob(s)", graph_.describe(n),
                  node.param.param_size(), decls.size());
    node.params.clear();
    for (size_t i = 0; i < decls.size(); ++i) {
      proto::ParamSpec spec = static_cast<int>(i) < node.param.param_size() ? node.param.param(i) : proto::ParamSpec();
      ParamRef ref;
      ref.key = fmt::format("{}.{}", node.name, i);
      ref.share_name = spec.name();
      ref.lr_mult = decls[i].learnable ? spec.lr_mult() : 0.f;
      ref.decay_mult = decls[i].learnable ? spec.decay_mult() : 0.f;
      int idx = ref.share_name.empty() ? -1 : store_.find_shared(ref.share_name);
      if (idx < 0) idx = store_.find(ref.key);
      if (idx >= 0) {
        const Shape& have = store_.at(idx).data.shape();
        if (have != decls[i].shape)
          input_error("{}: parameter blob {} has shape {} but the shared/existing blob '{}' has {}", graph_.describe(n), i,
                      shape_str(decls[i].shape), store_.at(idx).key, shape_str(have));
      } else {
        idx = store_.add(ref.key, ref.share_name, decls[i].shape, decls[i].learnable);
        Param& p = store_.at(idx);
        p.lr_mult = ref.lr_mult;
        p.decay_mult = ref.decay_mult;
        Rng rng = Rng::derive(seed, ref.key);
        fill_tensor(p.data, decls[i].filler, rng, graph_.describe(n));
      }
      node.params.push_back(ref);
      node_params_[n].push_back(idx);
      if (std::find(param_indices_.begin(), param_indices_.end(), idx) == param_indices_.end())
        param_indices_.push_back(idx);
    }
  }
}

void Net::plan_gradients(bool force_backward) {
  int nv = static_cast<int>(graph_.values.size());
  std::vector<bool> upstream(nv, false), contrib(nv, false);
  loss_weight_.assign(nv, 0.f);
  auto learnable = [&](int n) {
    for (size_t i = 0; i < node_params_[n].size(); ++i)
      if (store_.at(node_params_[n][i]).learnable && graph_.nodes[n].params[i].lr_mult != 0.f) return true;
    return false;
  };
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    bool up = learnable(n) || force_backward;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      up = up || (upstream[node.inputs[i]] && ops_[n]->can_propagate_to(static_cast<int>(i)) && node.propagate_down[i]);
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      upstream[node.outputs[j]] = up && ops_[n]->has_backward();
      float lw = static_cast<int>(j) < node.param.loss_weight_size() ? node.param.loss_weight(j)
                 : j == 0 ? ops_[n]->default_loss_weight() : 0.f;
      loss_weight_[node.outputs[j]] = lw;
      contrib[node.outputs[j]] = lw != 0.f;
    }
  }
  runs_backward_.assign(num_nodes(), false);
  need_in_grad_.assign(num_nodes(), {});
  // TEST nets only run forward (unless the net asks for force_backward): no gradient
  // buffers, no backward kernels.
  bool any_backward = phase_ == proto::TRAIN || force_backward;
  for (int n = num_nodes() - 1; n >= 0 && any_backward; --n) {
    const Node& node = graph_.nodes[n];
    bool out_contrib = std::any_of(node.outputs.begin(), node.outputs.end(), [&](int v) { return contrib[v]; });
    need_in_grad_[n].assign(node.inputs.size(), false);
    bool any_in = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      bool need = out_contrib && ops_[n]->has_backward() && upstream[node.inputs[i]] &&
                  ops_[n]->can_propagate_to(static_cast<int>(i)) && node.propagate_down[i];
      need_in_grad_[n][i] = need;
      any_in = any_in || need;
    }
    runs_backward_[n] = out_contrib && ops_[n]->has_backward() && (any_in || learnable(n));
    if (!runs_backward_[n]) std::fill(need_in_grad_[n].begin(), need_in_grad_[n].end(), false);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (need_in_grad_[n][i]) contrib[node.inputs[i]] = true;
  }
  // Which writes of a value's gradient come second (and so must be summed): the loss seed is
  // written first, then consumers in reverse order.
  for (int n = 0; n < num_nodes(); ++n) need_in_grad_[n].resize(graph_.nodes[n].inputs.size(), false);
  accumulate_in_grad_.assign(num_nodes(), {});
  std::vector<int> writers(nv, 0);
  for (int v = 0; v < nv; ++v)
    if (loss_weight_[v] != 0.f) writers[v] = 1;
  for (int n = num_nodes() - 1; n >= 0; --n) {
    const Node& node = graph_.nodes[n];
    accumulate_in_grad_[n].assign(node.inputs.size(), false);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!need_in_grad_[n][i]) continue;
      accumulate_in_grad_[n][i] = writers[node.inputs[i]]++ > 0;
    }
  }
  // A parameter's gradient is complete after the backward of the earliest node using it.
  grad_ready_after_.assign(num_nodes(), {});
  for (int idx : param_indices_) {
    for (int n = 0; n < num_nodes(); ++n) {
      auto& np = node_params_[n];
      if (runs_backward_[n] && std::find(np.begin(), np.end(), idx) != np.end()) {
        grad_ready_after_[n].push_back(idx);
        break;
      }
    }
  }
  outputs_ = graph_.outputs();
  // Values needing a gradient buffer: anything a running backward reads or writes.
  grad_.assign(nv, Tensor());
  data_.assign(nv, Tensor());
  for (int n = 0; n < num_nodes(); ++n) {
    if (!runs_backward_[n]) continue;
    for (int v : graph_.nodes[n].outputs) grad_[v] = Tensor(Shape{0});
    for (size_t i = 0; i < graph_.nodes[n].inputs.size(); ++i)
      if (need_in_grad_[n][i]) grad_[graph_.nodes[n].inputs[i]] = Tensor(Shape{0});
  }
}

void Net::plan_layouts() {
  int nv = static_cast<int>(graph_.values.size());
  layout_.assign(nv, dnnl::memory::desc());
  auto blocked = [&](int v) { return layout_[v].data.ndims > 0; };
  // Optimistic forward pass: every op gets the layout it prefers. BKS_LAYOUTS=plain turns
  // layout propagation off (for debugging and comparison).
  const char* env = std::getenv("BKS_LAYOUTS");
  bool plain_only = env && std::string(env) == "plain";
  for (int n = 0; n < num_nodes() && !plain_only; ++n) {
    const Node& node = graph_.nodes[n];
    LayoutRule rule = ops_[n]->layout_rule();
    std::vector<dnnl::memory::desc> in;
    for (int v : node.inputs) in.push_back(layout_[v]);
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      int v = node.outputs[j];
      if (rule == LayoutRule::any_in_same_out && !in.empty()) layout_[v] = in[0];
      else if (rule == LayoutRule::any_in_any_out) layout_[v] = ops_[n]->preferred_output_layout(static_cast<int>(j), in);
    }
  }
  // Fall back to plain wherever a reader needs it, until nothing changes. Demotions only go
  // one way, so this ends.
  bool changed = true;
  auto demote = [&](int v) {
    if (!blocked(v)) return;
    // An int8 value (deploy --precision int8) has int8 readers only; deploy guarantees it.
    if (layout_[v].data_type() != dnnl::memory::data_type::f32)
      input_error("{}: '{}' holds int8 values, but a layer reading it takes f32 only (or it is an output)",
                  graph_.source, graph_.values[v].name);
    layout_[v] = dnnl::memory::desc();
    changed = true;
  };
  while (changed) {
    changed = false;
    for (int v = 0; v < nv; ++v)
      if (graph_.values[v].consumers.empty() || loss_weight_[v] != 0.f) demote(v);
    for (int n = 0; n < num_nodes(); ++n) {
      const Node& node = graph_.nodes[n];
      LayoutRule rule = ops_[n]->layout_rule();
      if (rule == LayoutRule::plain_only)
        for (int v : node.inputs) demote(v);
      if (rule == LayoutRule::any_in_same_out && !node.inputs.empty())
        for (int v : node.outputs)
          if (!(layout_[v] == layout_[node.inputs[0]])) {
            demote(v);
            demote(node.inputs[0]);
          }
    }
  }
  for (int n = 0; n < num_nodes(); ++n) {
    std::vector<dnnl::memory::desc> in, out;
    for (int v : graph_.nodes[n].inputs) in.push_back(layout_[v]);
    for (int v : graph_.nodes[n].outputs) out.push_back(layout_[v]);
    ops_[n]->set_layouts(in, out);
  }
}

void Net::allocate() {
  plan_memory();
  options_.arena->add_user(this, [this] { bind_to_arena(); });
  options_.arena->reserve(arena_bytes_);  // rebinds every user of the arena, this net too
  bind_to_arena();
}

namespace {

struct Interval {
  size_t* offset;  // where the placement is written
  size_t bytes;
  int start, end;  // inclusive steps
};

// First fit, largest first: each buffer goes at the lowest offset free for its whole life.
size_t place(std::vector<Interval>& items) {
  std::sort(items.begin(), items.end(), [](const Interval& a, const Interval& b) { return a.bytes > b.bytes; });
  std::vector<const Interval*> placed;
  size_t total = 0;
  for (auto& it : items) {
    std::vector<std::pair<size_t, size_t>> busy;
    for (auto* p : placed)
      if (p->start <= it.end && it.start <= p->end) busy.emplace_back(*p->offset, *p->offset + p->bytes);
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [b, e] : busy) {
      if (off + it.bytes <= b) break;
      off = std::max(off, e);
    }
    *it.offset = off;
    placed.push_back(&it);
    total = std::max(total, off + it.bytes);
  }
  return total;
}

size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

// Liveness on a timeline of 2N steps: node n's forward at step n, its backward at 2N-1-n.
// A buffer lives from its first write to its last read (reads in backward included, as
// ops declare them); values read after the pass (net outputs, losses) live to the end.
void Net::plan_memory() {
  const int N = num_nodes(), end_of_pass = 2 * N;
  const int nv = static_cast<int>(graph_.values.size());
  auto bwd = [&](int n) { return 2 * N - 1 - n; };
  auto root = [](const std::vector<int>& alias, int v) {
    while (alias[v] >= 0) v = alias[v];
    return v;
  };
  data_offset_.assign(nv, kDedicated);
  grad_offset_.assign(nv, kDedicated);
  std::vector<int> dstart(nv, INT32_MAX), dend(nv, -1), gstart(nv, INT32_MAX), gend(nv, -1);
  std::vector<bool> keep_data(nv, !options_.reuse_buffers), keep_grad(nv, !options_.reuse_buffers);
  for (int v = 0; v < nv; ++v) {
    const Value& val = graph_.values[v];
    int r = root(data_alias_, v), p = val.producer;
    if (p < 0 || ops_[p]->is_external_input()) keep_data[r] = true;  // filled by the caller
    int first = std::max(p, 0), last = first;
    for (int c : val.consumers) {
      last = std::max(last, c);
      const Node& cn = graph_.nodes[c];
      for (size_t i = 0; i < cn.inputs.size(); ++i)
        if (cn.inputs[i] == v && runs_backward_[c] && ops_[c]->backward_reads_input_at(static_cast<int>(i)))
          last = std::max(last, bwd(c));
    }
    if (p >= 0 && runs_backward_[p] && ops_[p]->backward_reads_output()) last = std::max(last, bwd(p));
    if (val.consumers.empty() || loss_weight_[v] != 0.f) last = end_of_pass;
    dstart[r] = std::min(dstart[r], first);
    dend[r] = std::max(dend[r], last);
    if (!grad_[v].defined()) continue;
    int g = root(grad_alias_, v), gfirst = INT32_MAX, glast = -1;
    if (loss_weight_[v] != 0.f) gfirst = N;  // seeded before the first backward
    for (int c : val.consumers) {
      const Node& cn = graph_.nodes[c];
      for (size_t i = 0; i < cn.inputs.size(); ++i)
        if (cn.inputs[i] == v && need_in_grad_[c][i]) gfirst = std::min(gfirst, bwd(c)), glast = std::max(glast, bwd(c));
    }
    if (p >= 0 && runs_backward_[p]) glast = std::max(glast, bwd(p));
    if (gfirst == INT32_MAX) keep_grad[g] = true;  // never written: must stay zero
    gstart[g] = std::min(gstart[g], gfirst == INT32_MAX ? 0 : gfirst);
    gend[g] = std::max(gend[g], std::max(glast, gfirst == INT32_MAX ? 0 : gfirst));
  }
  auto buffer_bytes = [&](int v) {
    return aligned(blocked_bytes(v) ? blocked_bytes(v) : static_cast<size_t>(shape_numel(graph_.values[v].shape)) * 4);
  };
  std::vector<Interval> items;
  for (int v = 0; v < nv; ++v) {
    size_t bytes = buffer_bytes(v);
    if (data_alias_[v] < 0 && !keep_data[v]) items.push_back({&data_offset_[v], bytes, dstart[v], dend[v]});
    if (grad_[v].defined() && grad_alias_[v] < 0 && !keep_grad[v]) items.push_back({&grad_offset_[v], bytes, gstart[v], gend[v]});
  }
  scratch_offset_.clear();
  for (int n = 0; n < N; ++n)
    for (size_t i = 0; i < graph_.nodes[n].inputs.size(); ++i)
      if (accumulate_in_grad_[n][i]) scratch_offset_.push_back(kDedicated);
  size_t k = 0;
  for (int n = 0; n < N; ++n)
    for (size_t i = 0; i < graph_.nodes[n].inputs.size(); ++i)
      if (accumulate_in_grad_[n][i]) {
        if (options_.reuse_buffers)
          items.push_back({&scratch_offset_[k], buffer_bytes(graph_.nodes[n].inputs[i]), bwd(n), bwd(n)});
        ++k;
      }
  arena_bytes_ = place(items);
}

void Net::bind_to_arena() {
  const auto& storage = options_.arena->storage();
  auto bind = [&](Tensor& t, size_t off, const Shape& s, size_t phys, DType dtype) {
    if (off != kDedicated) {
      t.bind(storage, off, s, phys, dtype);
      return;
    }
    // Own buffer: drop an arena binding first so reshape() cannot land inside the arena.
    if (storage && t.uses_storage(storage.get())) t = Tensor();
    t.reshape(s, phys, dtype);
  };
  // A value shares the buffer of the value it aliases, bound first: an earlier one (in
  // place) or a later one (a Concat's output, which its inputs are runs of).
  const int nv = static_cast<int>(graph_.values.size());
  std::vector<bool> bound(nv, false);
  std::function<void(int)> bind_data = [&](int v) {
    if (bound[v]) return;
    bound[v] = true;
    const Shape& s = graph_.values[v].shape;
    if (int a = data_alias_[v]; a >= 0) {
      bind_data(a);
      data_[v].alias_of(data_[a], s, data_alias_offset_[v]);
    } else {
      bind(data_[v], data_offset_[v], s, blocked_bytes(v), value_dtype(v));
    }
  };
  for (int v = 0; v < nv; ++v) {
    const Shape& s = graph_.values[v].shape;
    size_t phys = blocked_bytes(v);
    bind_data(v);
    if (!grad_[v].defined()) continue;
    if (grad_alias_[v] >= 0) grad_[v].alias_of(grad_[grad_alias_[v]], s);
    else bind(grad_[v], grad_offset_[v], s, phys, DType::f32);
  }
  size_t k = 0;
  for (int n = 0; n < num_nodes(); ++n)
    for (size_t i = 0; i < graph_.nodes[n].inputs.size(); ++i)
      if (accumulate_in_grad_[n][i]) {
        int v = graph_.nodes[n].inputs[i];
        if (k == scratch_.size()) scratch_.emplace_back(Shape{0});
        bind(scratch_[k], scratch_offset_[k], graph_.values[v].shape, blocked_bytes(v), DType::f32);
        ++k;
      }
}

bool Net::can_write_in_place(int n, int x) const {
  const Op& op = *ops_[n];
  if (!op.allows_inplace()) return false;
  if (runs_backward_[n] && op.backward_reads_input()) return false;
  int root = x;
  while (data_alias_[root] >= 0) root = data_alias_[root];
  for (int u = 0; u < static_cast<int>(graph_.values.size()); ++u) {
    int r = u;
    while (r >= 0 && data_alias_[r] >= 0) r = data_alias_[r];
    if (r != root) continue;
    const Value& val = graph_.values[u];
    if (val.producer >= 0) {
      const Op& prod = *ops_[val.producer];
      if (prod.is_external_input()) return false;
      if (prod.backward_reads_output() && runs_backward_[val.producer]) return false;
    }
    for (int c : val.consumers) {
      if (c == n) continue;
      // Another reader is fine only if it is itself a member of this buffer chain.
      bool in_chain = false;
      for (int o : graph_.nodes[c].outputs) {
        int ro = o;
        while (ro >= 0 && data_alias_[ro] >= 0) ro = data_alias_[ro];
        in_chain = in_chain || (data_alias_[o] >= 0 && ro == root);
      }
      if (!in_chain) return false;
    }
  }
  return true;
}

// A Concat written in place: each producer writes straight into its run of the output
// (inference only, plain layouts, each input read by the Concat alone and made by an op of
// this net), and the Concat moves nothing.
bool Net::place_concat_inputs(int n) {
  const Node& node = graph_.nodes[n];
  std::vector<int64_t> at = ops_[n]->input_runs_in_output();
  if (runs_backward_[n] || at.size() != node.inputs.size() || node.outputs.size() != 1) return false;
  int y = node.outputs[0];
  if (is_blocked(y)) return false;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    int x = node.inputs[i];
    const Value& v = graph_.values[x];
    if (is_blocked(x) || data_alias_[x] >= 0 || v.consumers.size() != 1 || v.producer < 0 ||
        ops_[v.producer]->is_external_input() || loss_weight_[x] != 0.f ||
        std::count(node.inputs.begin(), node.inputs.end(), x) != 1)
      return false;
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    data_alias_[node.inputs[i]] = y;
    data_alias_offset_[node.inputs[i]] = static_cast<size_t>(at[i]) * sizeof(float);
  }
  return true;
}

void Net::plan_buffers() {
  int nv = static_cast<int>(graph_.values.size());
  data_alias_.assign(nv, -1);
  data_alias_offset_.assign(nv, 0);
  grad_alias_.assign(nv, -1);
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    if (node.inputs.empty() || node.outputs.empty()) continue;
    if (place_concat_inputs(n)) continue;
    int x = node.inputs[0], y = node.outputs[0];
    bool alias = false;
    if (ops_[n]->output_is_view() && node.inputs.size() == 1 && !is_blocked(x)) {
      alias = true;
    } else if (graph_.values[x].name == graph_.values[y].name && layout_[x] == layout_[y] &&
               can_write_in_place(n, x)) {
      alias = true;
    }
    if (!alias) continue;
    data_alias_[y] = x;
    if (graph_.values[x].consumers.size() == 1 && need_in_grad_[n][0] && grad_[y].defined() &&
        loss_weight_[x] == 0.f)
      grad_alias_[y] = x;
  }
  scratch_.clear();
  allocate();
}

void Net::prepare_kernels() {
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    std::vector<Shape> in, out;
    for (int v : node.inputs) in.push_back(graph_.values[v].shape);
    for (int v : node.outputs) out.push_back(graph_.values[v].shape);
    ops_[n]->set_needs_input_grad(need_in_grad_[n]);
    ops_[n]->prepare(in, out);
    log::debug("{}: {} -> {} [{}]{}", graph_.describe(n), in.empty() ? "" : shape_str(in[0]),
               out.empty() ? "" : shape_str(out[0]), ops_[n]->kernel_name(),
               (!node.outputs.empty() && data_alias_[node.outputs[0]] >= 0) ? " (in place)" : "");
  }
}

void Net::build_calls() {
  calls_.assign(num_nodes(), OpCall());
  size_t scratch_i = 0;
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    OpCall& c = calls_[n];
    for (int v : node.inputs) c.in.push_back(&data_[v]);
    for (int v : node.outputs) c.out.push_back(&data_[v]);
    for (int idx : node_params_[n]) c.params.push_back(&store_.at(idx).data);
    for (int v : node.outputs) c.out_grad.push_back(grad_[v].defined() ? &grad_[v] : nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      Tensor* g = nullptr;
      if (need_in_grad_[n][i]) g = accumulate_in_grad_[n][i] ? &scratch_[scratch_i++] : &grad_[node.inputs[i]];
      c.in_grad.push_back(g);
    }
    c.param_grad.assign(node_params_[n].size(), nullptr);
  }
}

void Net::reshape() {
  infer_shapes();
  plan_layouts();
  allocate();
  prepare_kernels();
}

float Net::forward(int64_t step) {
  for (int n = 0; n < num_nodes(); ++n) {
    calls_[n].step = step;
    double t0 = profiler_ ? now_us() : 0.0;
    ops_[n]->forward(calls_[n]);
    if (profiler_) profiler_->record(n, graph_.nodes[n].name, Profiler::Pass::forward, t0, now_us());
  }
  double loss = 0.0;
  for (int v = 0; v < static_cast<int>(loss_weight_.size()); ++v) {
    if (loss_weight_[v] == 0.f) continue;
    const float* p = data_[v].f32();
    double s = 0.0;
    for (int64_t i = 0; i < data_[v].numel(); ++i) s += p[i];
    loss += loss_weight_[v] * s;
  }
  return static_cast<float>(loss);
}

void Net::backward() {
  for (int v = 0; v < static_cast<int>(loss_weight_.size()); ++v)
    if (loss_weight_[v] != 0.f && grad_[v].defined()) grad_[v].fill(loss_weight_[v]);
  for (int n = num_nodes() - 1; n >= 0; --n) {
    const Node& node = graph_.nodes[n];
    OpCall& c = calls_[n];
    if (!runs_backward_[n]) continue;
    for (size_t i = 0; i < node_params_[n].size(); ++i) {
      Param& p = store_.at(node_params_[n][i]);
      if (!p.learnable || node.params[i].lr_mult == 0.f) {
        c.param_grad[i] = nullptr;
        continue;
      }
      if (p.grad_written && !p.scratch.defined()) p.scratch = Tensor(p.data.shape());
      c.param_grad[i] = p.grad_written ? &p.scratch : &p.grad;
    }
    double t0 = profiler_ ? now_us() : 0.0;
    ops_[n]->backward(c);
    if (profiler_) profiler_->record(n, node.name, Profiler::Pass::backward, t0, now_us());
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (accumulate_in_grad_[n][i]) add_into(grad_[node.inputs[i]], *c.in_grad[i]);
    for (size_t i = 0; i < node_params_[n].size(); ++i) {
      if (!c.param_grad[i]) continue;
      Param& p = store_.at(node_params_[n][i]);
      if (c.param_grad[i] == &p.scratch) add_into(p.grad, p.scratch);
      p.grad_written = true;
    }
    if (grad_ready_)
      for (int idx : grad_ready_after_[n]) grad_ready_(idx);
  }
}

Tensor& Net::value(const std::string& name) {
  int v = graph_.find_value(name);
  if (v < 0) input_error("{}: no blob named '{}'", graph_.source, name);
  return data_[v];
}

std::vector<int> Net::inputs() const {
  std::vector<int> in;
  for (int n = 0; n < num_nodes(); ++n)
    if (ops_[n]->is_external_input())
      for (int v : graph_.nodes[n].outputs) in.push_back(v);
  return in;
}

Tensor Net::plain_copy(int v, bool gradient) {
  Tensor& src = gradient ? grad_[v] : data_[v];
  Tensor out(graph_.values[v].shape);
  if (!is_blocked(v)) {
    out.copy_from(src);
    return out;
  }
  auto& be = static_cast<CpuBackend&>(backend_);
  dnnl::memory from(layout_[v], be.engine(), src.raw());
  dnnl::memory to(plain_md(out.shape()), be.engine(), out.raw());
  dnnl::reorder(from, to).execute(be.stream(), from, to);
  be.stream().wait();
  return out;
}

size_t Net::blocked_bytes(int v) const { return is_blocked(v) ? layout_[v].get_size() : 0; }

DType Net::value_dtype(int v) const {
  if (!is_blocked(v)) return DType::f32;
  switch (layout_[v].data_type()) {
    case dnnl::memory::data_type::s8: return DType::s8;
    case dnnl::memory::data_type::u8: return DType::u8;
    default: return DType::f32;
  }
}

std::pair<int64_t, int64_t> Net::data_extent() const {
  for (int n = 0; n < num_nodes(); ++n)
    if (ops_[n]->dataset_size() > 0 && !graph_.nodes[n].outputs.empty())
      return {data_[graph_.nodes[n].outputs[0]].dim(0), ops_[n]->dataset_size()};
  // No data layer: the batch is the first axis of the first Input blob.
  for (int n = 0; n < num_nodes(); ++n)
    if (ops_[n]->is_external_input() && !graph_.nodes[n].outputs.empty()) {
      const Tensor& t = data_[graph_.nodes[n].outputs[0]];
      return {t.ndim() > 0 ? t.dim(0) : 1, 0};
    }
  return {0, 0};
}

std::string Net::describe() const {
  std::string s;
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    std::vector<std::string> outs;
    for (int v : node.outputs) outs.push_back(fmt::format("{} {}", graph_.values[v].name, shape_str(graph_.values[v].shape)));
    bool first_out = !node.outputs.empty();
    s += fmt::format("  {:<16} {:<22} -> {:<40} [{}]{}{}{}\n", node.name, node.type, fmt::join(outs, ", "),
                     ops_[n]->kernel_name(), !first_out || data_alias_[node.outputs[0]] < 0 ? ""
                     : graph_.values[data_alias_[node.outputs[0]]].producer > n
                         ? fmt::format(" written into {}", graph_.values[data_alias_[node.outputs[0]]].name)
                         : std::string(" in-place"),
                     !first_out || !is_blocked(node.outputs[0]) ? ""
                     : value_dtype(node.outputs[0]) == DType::f32 ? " blocked-layout"
                                                                   : value_dtype(node.outputs[0]) == DType::u8 ? " u8 output" : " s8 output",
                     runs_backward_[n] ? "" : " (no backward)");
  }
  return s;
}

}  // namespace bks
