#include "runtime/plan.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "backend/dnnl_util.h"
#include "core/error.h"

namespace bks {
namespace {

int num_nodes(const Graph& g) { return static_cast<int>(g.nodes.size()); }
int num_values(const Graph& g) { return static_cast<int>(g.values.size()); }
size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

bool reads_input_in_backward(const OpFacts& f, int i) {
  return i < static_cast<int>(f.reads_input_in_backward.size()) ? f.reads_input_in_backward[i] : f.backward_reads_input;
}
bool can_propagate(const OpFacts& f, int i) {
  return i >= static_cast<int>(f.can_propagate_to.size()) || f.can_propagate_to[i];
}

// Every value's alias root (the value whose buffer it shares, at the end of its chain of
// aliases), walking each link once: following each value's chain alone costs the chain's
// length per value, which a long in-place chain made quadratic per call.
std::vector<int> alias_roots(const std::vector<int>& alias) {
  constexpr int kUnknown = -2;
  std::vector<int> root(alias.size(), kUnknown), path;
  for (int v = 0; v < static_cast<int>(alias.size()); ++v) {
    int u = v;
    path.clear();
    while (root[u] == kUnknown && alias[u] >= 0) {
      path.push_back(u);
      u = alias[u];
    }
    if (root[u] == kUnknown) root[u] = u;
    for (int w : path) root[w] = root[u];
  }
  return root;
}

// First fit, largest first: each buffer goes at the lowest offset free for its whole life.
size_t place(std::vector<MemoryPlan::Interval>& items, const std::vector<size_t*>& offsets) {
  std::vector<int> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return items[a].bytes > items[b].bytes; });
  std::vector<int> placed;
  size_t total = 0;
  for (int k : order) {
    const auto& it = items[k];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed)
      if (items[p].start <= it.end && it.start <= items[p].end)
        busy.emplace_back(*offsets[p], *offsets[p] + items[p].bytes);
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [b, e] : busy) {
      if (off + it.bytes <= b) break;
      off = std::max(off, e);
    }
    *offsets[k] = off;
    placed.push_back(k);
    total = std::max(total, off + it.bytes);
  }
  return total;
}

// Whether node n may write its output over input x's buffer (Caffe's in-place layers).
bool can_write_in_place(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                        const std::vector<int>& data_alias, int n, int x) {
  const OpFacts& f = facts[n];
  if (!f.allows_inplace) return false;
  if (gp.runs_backward[n] && f.backward_reads_input) return false;
  const std::vector<int> roots = alias_roots(data_alias);
  const int root = roots[x];
  for (int u = 0; u < num_values(g); ++u) {
    if (roots[u] != root) continue;
    const Value& val = g.values[u];
    if (val.producer >= 0) {
      const OpFacts& prod = facts[val.producer];
      if (prod.external_input) return false;
      if (prod.backward_reads_output && gp.runs_backward[val.producer]) return false;
    }
    for (int c : val.consumers) {
      if (c == n) continue;
      // Another reader is fine only if it is itself a member of this buffer chain.
      bool in_chain = false;
      for (int o : g.nodes[c].outputs) in_chain = in_chain || (data_alias[o] >= 0 && roots[o] == root);
      if (!in_chain) return false;
    }
  }
  return true;
}

// The same layout, or int8 layouts that differ in signedness only: the same bytes (a kernel
// adding onto them reads them as their own type).
bool same_bytes(const dnnl::memory::desc& a, const dnnl::memory::desc& b) {
  if (a == b) return true;
  auto int8 = [](const dnnl::memory::desc& m) {
    return m.data_type() == dnnl::memory::data_type::s8 || m.data_type() == dnnl::memory::data_type::u8;
  };
  if (!int8(a) || !int8(b)) return false;
  dnnl::memory::desc c = a;
  c.data.data_type = b.data.data_type;
  return c == b;
}

// Whether node n's output may take over input x's buffer, its kernel adding onto the
// values there (OpFacts::output_adds_onto_input): inference only, the same layout and size,
// and every value sharing x's buffer made by an op of this graph and read by no node after
// n (nor by n through another input, nor after the pass).
bool can_add_onto_input(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                        const std::vector<dnnl::memory::desc>& layout, const std::vector<bool>& batch_from_data,
                        const AliasPlan& a, int n, int x) {
  const Node& node = g.nodes[n];
  const int y = node.outputs[0];
  if (gp.runs_backward[n] || a.data_alias[y] >= 0 || !same_bytes(layout[x], layout[y]) ||
      g.values[x].shape != g.values[y].shape || batch_from_data[x] || batch_from_data[y] ||
      std::count(node.inputs.begin(), node.inputs.end(), x) != 1)
    return false;
  const std::vector<int> roots = alias_roots(a.data_alias);
  const int root = roots[x];
  for (int u = 0; u < num_values(g); ++u) {
    if (roots[u] != root) continue;
    const Value& val = g.values[u];
    if (val.producer < 0 || facts[val.producer].external_input || val.consumers.empty() || gp.loss_weight[u] != 0.f ||
        a.data_alias_offset[u] != 0)
      return false;
    for (int c : val.consumers)
      if (c > n || (c == n && u != x)) return false;
  }
  return true;
}

// A Concat written in place: producers write straight into their runs of the output
// (inference only, plain or whole channel blocks, each input read by the Concat alone and
// made by an op of this graph), and the Concat moves only the other inputs. True when the
// node is such a Concat (whether or not any input could be placed).
bool place_concat_inputs(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                         const std::vector<dnnl::memory::desc>& layout, const std::vector<bool>& batch_from_data,
                         AliasPlan& a, int n) {
  const Node& node = g.nodes[n];
  const std::vector<int64_t>& at = facts[n].input_runs_in_output;
  auto blocked = [&](int v) { return layout[v].data.ndims > 0; };
  if (gp.runs_backward[n] || at.size() != node.inputs.size() || node.outputs.size() != 1) return false;
  int y = node.outputs[0];
  // The runs' offsets hold for the planned batch only.
  if (batch_from_data[y]) return true;
  // A channel-blocked output takes inputs in its blocking, each of whole blocks: then each
  // is, per image, one run of the output as in NCHW (and the facts' offsets hold).
  const int64_t block = channel_block(layout[y], g.values[y].shape);
  if (blocked(y) && !block) return false;
  auto fits = [&](int x) {
    const Shape& s = g.values[x].shape;
    return block ? s.size() == 4 && s[1] % block == 0 && channel_block(layout[x], s) == block : !blocked(x);
  };
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const int x = node.inputs[i];
    const Value& v = g.values[x];
    if (!fits(x) || a.data_alias[x] >= 0 || v.consumers.size() != 1 || v.producer < 0 ||
        facts[v.producer].external_input || gp.loss_weight[x] != 0.f ||
        std::count(node.inputs.begin(), node.inputs.end(), x) != 1)
      continue;
    a.data_alias[x] = y;
    a.data_alias_offset[x] = static_cast<size_t>(at[i]) * sizeof(float);
  }
  return true;
}

}  // namespace

size_t Plan::buffer_bytes(const Graph& g, int v) const {
  size_t blocked = blocked_bytes(v);
  return aligned(blocked ? blocked : static_cast<size_t>(shape_numel(g.values[v].shape)) * sizeof(float));
}

GradientPlan plan_gradients(const Graph& g, const std::vector<OpFacts>& facts, bool training, bool force_backward,
                            const std::vector<std::vector<int>>& node_params) {
  const int N = num_nodes(g), nv = num_values(g);
  GradientPlan gp;
  std::vector<bool> upstream(nv, false), contrib(nv, false);
  gp.loss_weight.assign(nv, 0.f);
  for (int n = 0; n < N; ++n) {
    const Node& node = g.nodes[n];
    bool up = facts[n].learnable || force_backward;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      up = up || (upstream[node.inputs[i]] && can_propagate(facts[n], static_cast<int>(i)) && node.propagate_down[i]);
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      upstream[node.outputs[j]] = up && facts[n].has_backward;
      float lw = j < node.loss_weight.size() ? node.loss_weight[j] : j == 0 ? facts[n].default_loss_weight : 0.f;
      gp.loss_weight[node.outputs[j]] = lw;
      contrib[node.outputs[j]] = lw != 0.f;
    }
  }
  gp.runs_backward.assign(N, false);
  gp.need_in_grad.assign(N, {});
  // TEST nets only run forward (unless the net asks for force_backward): no gradient
  // buffers, no backward kernels.
  const bool any_backward = training || force_backward;
  for (int n = N - 1; n >= 0; --n) {
    const Node& node = g.nodes[n];
    gp.need_in_grad[n].assign(node.inputs.size(), false);
    if (!any_backward) continue;
    bool out_contrib = std::any_of(node.outputs.begin(), node.outputs.end(), [&](int v) { return contrib[v]; });
    bool any_in = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      bool need = out_contrib && facts[n].has_backward && upstream[node.inputs[i]] &&
                  can_propagate(facts[n], static_cast<int>(i)) && node.propagate_down[i];
      gp.need_in_grad[n][i] = need;
      any_in = any_in || need;
    }
    gp.runs_backward[n] = out_contrib && facts[n].has_backward && (any_in || facts[n].learnable);
    if (!gp.runs_backward[n]) std::fill(gp.need_in_grad[n].begin(), gp.need_in_grad[n].end(), false);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (gp.need_in_grad[n][i]) contrib[node.inputs[i]] = true;
  }
  // Which writes of a value's gradient come second (and so must be summed): the loss seed is
  // written first, then consumers in reverse order.
  gp.accumulate_in_grad.assign(N, {});
  std::vector<int> writers(nv, 0);
  for (int v = 0; v < nv; ++v)
    if (gp.loss_weight[v] != 0.f) writers[v] = 1;
  for (int n = N - 1; n >= 0; --n) {
    const Node& node = g.nodes[n];
    gp.accumulate_in_grad[n].assign(node.inputs.size(), false);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (gp.need_in_grad[n][i]) gp.accumulate_in_grad[n][i] = writers[node.inputs[i]]++ > 0;
  }
  // A parameter's gradient is complete after the backward of the earliest node using it.
  gp.grad_ready_after.assign(N, {});
  std::vector<int> seen;
  for (int n = 0; n < N; ++n)
    for (int key : n < static_cast<int>(node_params.size()) ? node_params[n] : std::vector<int>{}) {
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      for (int m = 0; m < N; ++m) {
        const auto& np = node_params[m];
        if (gp.runs_backward[m] && std::find(np.begin(), np.end(), key) != np.end()) {
          gp.grad_ready_after[m].push_back(key);
          seen.push_back(key);
          break;
        }
      }
    }
  // Values needing a gradient buffer: anything a running backward reads or writes.
  gp.has_grad.assign(nv, false);
  for (int n = 0; n < N; ++n) {
    if (!gp.runs_backward[n]) continue;
    for (int v : g.nodes[n].outputs) gp.has_grad[v] = true;
    for (size_t i = 0; i < g.nodes[n].inputs.size(); ++i)
      if (gp.need_in_grad[n][i]) gp.has_grad[g.nodes[n].inputs[i]] = true;
  }
  return gp;
}

std::vector<bool> plan_batch_from_data(const Graph& g, const std::vector<OpFacts>& facts) {
  std::vector<bool> from_data(num_values(g), false);
  for (int n = 0; n < num_nodes(g); ++n) {
    const Node& node = g.nodes[n];
    bool d = facts[n].batch_from_data ||
             std::any_of(node.inputs.begin(), node.inputs.end(), [&](int v) { return from_data[v]; });
    for (int v : node.outputs) from_data[v] = d;
  }
  return from_data;
}

std::vector<dnnl::memory::desc> plan_layouts(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                                             const std::vector<bool>& batch_from_data, const PreferredLayout& preferred,
                                             bool plain_only) {
  const int N = num_nodes(g), nv = num_values(g);
  std::vector<dnnl::memory::desc> layout(nv);
  auto blocked = [&](int v) { return layout[v].data.ndims > 0; };
  // Optimistic forward pass: every op gets the layout it prefers.
  for (int n = 0; n < N && !plain_only; ++n) {
    const Node& node = g.nodes[n];
    LayoutRule rule = facts[n].layout_rule;
    std::vector<dnnl::memory::desc> in;
    for (int v : node.inputs) in.push_back(layout[v]);
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      int v = node.outputs[j];
      if (rule == LayoutRule::any_in_same_out && !in.empty())
        layout[v] = in[0];
      else if (rule == LayoutRule::any_in_any_out)
        layout[v] = preferred(n, static_cast<int>(j), in);
    }
  }
  // Fall back to plain wherever a reader needs it, until nothing changes. Demotions only go
  // one way, so this ends.
  bool changed = true;
  auto demote = [&](int v) {
    if (!blocked(v)) return;
    // An int8 value (deploy --precision int8) has int8 readers only; deploy guarantees it.
    // A bf16 one may become f32: the ops writing bf16 (convolution, pooling, concat)
    // convert to any layout asked of them.
    if (is_int8(layout[v]))
      input_error("{}: '{}' holds int8 values, but a layer reading it takes f32 only (or it is an output)", g.source,
                  g.values[v].name);
    layout[v] = dnnl::memory::desc();
    changed = true;
  };
  auto visit = [&](int n) {
    const Node& node = g.nodes[n];
    LayoutRule rule = facts[n].layout_rule;
    if (rule == LayoutRule::plain_only ||
        (facts[n].plain_output_takes_plain_inputs && !node.outputs.empty() && !blocked(node.outputs[0])))
      for (int v : node.inputs) demote(v);
    // Ops passing their input's layout on work on f32 elements.
    if (rule == LayoutRule::any_in_same_out && !node.inputs.empty() && blocked(node.inputs[0]) &&
        layout[node.inputs[0]].data_type() != dnnl::memory::data_type::f32)
      demote(node.inputs[0]);
    if (rule == LayoutRule::any_in_same_out && !node.inputs.empty())
      for (int v : node.outputs)
        if (!(layout[v] == layout[node.inputs[0]])) {
          demote(v);
          demote(node.inputs[0]);
        }
  };
  // Demotions travel both ways (a reader's need back to the writer, a same-layout op's
  // input on to its output): each round sweeps forwards then backwards, so that a long
  // chain settles in a round or two instead of one round per link.
  while (changed) {
    changed = false;
    for (int v = 0; v < nv; ++v)
      if (g.values[v].consumers.empty() || gp.loss_weight[v] != 0.f || batch_from_data[v]) demote(v);
    for (int n = 0; n < N; ++n) visit(n);
    for (int n = N - 1; n >= 0; --n) visit(n);
  }
  return layout;
}

AliasPlan plan_aliases(const Graph& g, const std::vector<OpFacts>& facts, const GradientPlan& gp,
                       const std::vector<dnnl::memory::desc>& layout, const std::vector<bool>& batch_from_data,
                       bool reuse_buffers) {
  const int nv = num_values(g);
  AliasPlan a;
  a.data_alias.assign(nv, -1);
  a.data_alias_offset.assign(nv, 0);
  a.grad_alias.assign(nv, -1);
  auto blocked = [&](int v) { return layout[v].data.ndims > 0; };
  for (int n = 0; n < num_nodes(g); ++n) {
    const Node& node = g.nodes[n];
    if (node.inputs.empty() || node.outputs.empty()) continue;
    if (place_concat_inputs(g, facts, gp, layout, batch_from_data, a, n)) continue;
    int x = node.inputs[0], y = node.outputs[0];
    bool alias = false;
    const int onto = facts[n].output_adds_onto_input;
    if (facts[n].output_is_view && node.inputs.size() == 1 && !blocked(x)) {
      alias = true;
    } else if (g.values[x].name == g.values[y].name && layout[x] == layout[y] &&
               can_write_in_place(g, facts, gp, a.data_alias, n, x)) {
      alias = true;
    } else if (reuse_buffers && onto >= 0 && onto < static_cast<int>(node.inputs.size()) &&
               can_add_onto_input(g, facts, gp, layout, batch_from_data, a, n, node.inputs[onto])) {
      a.data_alias[y] = node.inputs[onto];
      continue;
    }
    if (!alias) continue;
    a.data_alias[y] = x;
    if (g.values[x].consumers.size() == 1 && gp.need_in_grad[n][0] && gp.has_grad[y] && gp.loss_weight[x] == 0.f)
      a.grad_alias[y] = x;
  }
  return a;
}

// Liveness on a timeline of 2N steps: node n's forward at step n, its backward at 2N-1-n.
// A buffer lives from its first write to its last read (reads in backward included, as
// ops declare them); values read after the pass (net outputs, losses) live to the end.
MemoryPlan plan_memory(const Graph& g, const std::vector<OpFacts>& facts, const Plan& p, bool reuse_buffers) {
  const int N = num_nodes(g), end_of_pass = 2 * N, nv = num_values(g);
  const GradientPlan& gp = p.grad;
  auto bwd = [&](int n) { return 2 * N - 1 - n; };
  MemoryPlan m;
  m.data_offset.assign(nv, MemoryPlan::kDedicated);
  m.grad_offset.assign(nv, MemoryPlan::kDedicated);
  std::vector<int> dstart(nv, INT32_MAX), dend(nv, -1), gstart(nv, INT32_MAX), gend(nv, -1);
  std::vector<bool> keep_data(nv, !reuse_buffers), keep_grad(nv, !reuse_buffers);
  const std::vector<int> data_roots = alias_roots(p.alias.data_alias), grad_roots = alias_roots(p.alias.grad_alias);
  for (int v = 0; v < nv; ++v) {
    const Value& val = g.values[v];
    int r = data_roots[v], prod = val.producer;
    if (prod < 0 || facts[prod].external_input) keep_data[r] = true;  // filled by the caller
    int first = std::max(prod, 0), last = first;
    for (int c : val.consumers) {
      last = std::max(last, c);
      const Node& cn = g.nodes[c];
      for (size_t i = 0; i < cn.inputs.size(); ++i)
        if (cn.inputs[i] == v && gp.runs_backward[c] && reads_input_in_backward(facts[c], static_cast<int>(i)))
          last = std::max(last, bwd(c));
    }
    if (prod >= 0 && gp.runs_backward[prod] && facts[prod].backward_reads_output) last = std::max(last, bwd(prod));
    if (val.consumers.empty() || gp.loss_weight[v] != 0.f) last = end_of_pass;
    dstart[r] = std::min(dstart[r], first);
    dend[r] = std::max(dend[r], last);
    if (!gp.has_grad[v]) continue;
    int gr = grad_roots[v], gfirst = INT32_MAX, glast = -1;
    if (gp.loss_weight[v] != 0.f) gfirst = N;  // seeded before the first backward
    for (int c : val.consumers) {
      const Node& cn = g.nodes[c];
      for (size_t i = 0; i < cn.inputs.size(); ++i)
        if (cn.inputs[i] == v && gp.need_in_grad[c][i])
          gfirst = std::min(gfirst, bwd(c)), glast = std::max(glast, bwd(c));
    }
    if (prod >= 0 && gp.runs_backward[prod]) glast = std::max(glast, bwd(prod));
    if (gfirst == INT32_MAX) keep_grad[gr] = true;  // never written: must stay zero
    gstart[gr] = std::min(gstart[gr], gfirst == INT32_MAX ? 0 : gfirst);
    gend[gr] = std::max(gend[gr], std::max(glast, gfirst == INT32_MAX ? 0 : gfirst));
  }
  for (int n = 0; n < N; ++n)
    for (size_t i = 0; i < g.nodes[n].inputs.size(); ++i)
      if (gp.accumulate_in_grad[n][i]) {
        m.scratch_value.push_back(g.nodes[n].inputs[i]);
        m.scratch_offset.push_back(MemoryPlan::kDedicated);
      }
  std::vector<size_t*> offsets;
  using Kind = MemoryPlan::Interval::Kind;
  for (int v = 0; v < nv; ++v) {
    size_t bytes = p.buffer_bytes(g, v);
    if (p.alias.data_alias[v] < 0 && !keep_data[v]) {
      m.intervals.push_back({Kind::data, v, bytes, dstart[v], dend[v]});
      offsets.push_back(&m.data_offset[v]);
    }
    if (gp.has_grad[v] && p.alias.grad_alias[v] < 0 && !keep_grad[v]) {
      m.intervals.push_back({Kind::grad, v, bytes, gstart[v], gend[v]});
      offsets.push_back(&m.grad_offset[v]);
    }
  }
  if (reuse_buffers) {
    size_t k = 0;
    for (int n = 0; n < N; ++n)
      for (size_t i = 0; i < g.nodes[n].inputs.size(); ++i)
        if (gp.accumulate_in_grad[n][i]) {
          m.intervals.push_back(
              {Kind::scratch, static_cast<int>(k), p.buffer_bytes(g, g.nodes[n].inputs[i]), bwd(n), bwd(n)});
          offsets.push_back(&m.scratch_offset[k]);
          ++k;
        }
  }
  m.arena_bytes = place(m.intervals, offsets);
  return m;
}

Plan make_plan(const Graph& g, const std::vector<OpFacts>& facts, bool training, bool force_backward,
               const std::vector<std::vector<int>>& node_params, const PreferredLayout& preferred, bool reuse_buffers) {
  Plan p;
  p.grad = plan_gradients(g, facts, training, force_backward, node_params);
  p.outputs = g.outputs();
  p.batch_from_data = plan_batch_from_data(g, facts);
  p.layout = plan_layouts(g, facts, p.grad, p.batch_from_data, preferred, false);
  p.alias = plan_aliases(g, facts, p.grad, p.layout, p.batch_from_data, reuse_buffers);
  p.memory = plan_memory(g, facts, p, reuse_buffers);
  check_plan(g, facts, p);
  return p;
}

void check_plan(const Graph& g, const std::vector<OpFacts>& facts, const Plan& p) {
  const int N = num_nodes(g), nv = num_values(g);
  auto broken = [&](const std::string& what) { runtime_error("{}: execution plan broken: {}", g.source, what); };
  const GradientPlan& gp = p.grad;
  if (static_cast<int>(facts.size()) != N || static_cast<int>(gp.runs_backward.size()) != N ||
      static_cast<int>(gp.need_in_grad.size()) != N || static_cast<int>(gp.accumulate_in_grad.size()) != N ||
      static_cast<int>(gp.has_grad.size()) != nv || static_cast<int>(p.layout.size()) != nv ||
      static_cast<int>(p.alias.data_alias.size()) != nv || static_cast<int>(p.alias.grad_alias.size()) != nv ||
      static_cast<int>(p.memory.data_offset.size()) != nv || static_cast<int>(p.memory.grad_offset.size()) != nv ||
      static_cast<int>(p.batch_from_data.size()) != nv)
    broken("per-node or per-value tables do not match the graph");
  // A batch that changes as the net runs: the value's smaller batches are prefixes of its
  // buffer only in the plain layout.
  for (int v = 0; v < nv; ++v)
    if (p.batch_from_data[v] && p.is_blocked(v))
      broken(fmt::format("'{}' takes its batch from the data but is in a blocked layout", g.values[v].name));
  // Gradients: written by running backwards into existing buffers, summed from the second
  // writer on (the loss seed counts as the first).
  std::vector<int> writers(nv, 0);
  for (int v = 0; v < nv; ++v)
    if (gp.loss_weight[v] != 0.f && gp.has_grad[v]) writers[v] = 1;
  for (int n = N - 1; n >= 0; --n) {
    const Node& node = g.nodes[n];
    if (gp.need_in_grad[n].size() != node.inputs.size() || gp.accumulate_in_grad[n].size() != node.inputs.size())
      broken(fmt::format("node '{}': gradient flags do not match its inputs", node.name));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!gp.need_in_grad[n][i]) {
        if (gp.accumulate_in_grad[n][i]) broken(fmt::format("node '{}' sums a gradient it does not write", node.name));
        continue;
      }
      int v = node.inputs[i];
      if (!gp.runs_backward[n]) broken(fmt::format("node '{}' writes a gradient without running backward", node.name));
      if (!gp.has_grad[v]) broken(fmt::format("gradient of '{}' is written but has no buffer", g.values[v].name));
      if (gp.accumulate_in_grad[n][i] != (writers[v]++ > 0))
        broken(fmt::format("gradient of '{}' from node '{}' must be {}", g.values[v].name, node.name,
                           gp.accumulate_in_grad[n][i] ? "written, not summed (it is the first writer)"
                                                       : "summed (an earlier writer wrote it)"));
    }
    if (gp.runs_backward[n])
      for (int v : node.outputs)
        if (!gp.has_grad[v])
          broken(fmt::format("node '{}' runs backward but '{}' has no gradient", node.name, g.values[v].name));
  }
  // Aliases: chains end, members share a layout, and the op allowed it.
  for (int v = 0; v < nv; ++v) {
    for (const std::vector<int>* alias : {&p.alias.data_alias, &p.alias.grad_alias}) {
      int steps = 0;
      for (int u = v; (*alias)[u] >= 0; u = (*alias)[u])
        if (++steps > nv) broken(fmt::format("buffer aliases of '{}' form a cycle", g.values[v].name));
    }
    int a = p.alias.data_alias[v];
    if (a < 0) continue;
    int n = g.values[v].producer, reader = g.values[v].consumers.empty() ? -1 : g.values[v].consumers[0];
    bool view = n >= 0 && facts[n].output_is_view, in_place = n >= 0 && facts[n].allows_inplace;
    const int onto = n >= 0 ? facts[n].output_adds_onto_input : -1;
    const bool adds_onto = onto >= 0 && onto < static_cast<int>(g.nodes[n].inputs.size()) &&
                           g.nodes[n].inputs[onto] == a && v == g.nodes[n].outputs[0];
    in_place = in_place || adds_onto;
    bool concat_run = reader >= 0 && !facts[reader].input_runs_in_output.empty() && g.nodes[reader].outputs[0] == a;
    if (!view && !in_place && !concat_run)
      broken(fmt::format("'{}' shares the buffer of '{}' but no op allows it", g.values[v].name, g.values[a].name));
    if (!concat_run && !(adds_onto ? same_bytes(p.layout[v], p.layout[a]) : p.layout[v] == p.layout[a]))
      broken(fmt::format("'{}' shares the buffer of '{}' in another layout", g.values[v].name, g.values[a].name));
  }
  // Memory: buffers live at the same time never overlap, and all lie inside the arena.
  const auto& iv = p.memory.intervals;
  auto offset_of = [&](const MemoryPlan::Interval& it) {
    using Kind = MemoryPlan::Interval::Kind;
    return it.kind == Kind::data   ? p.memory.data_offset[it.index]
           : it.kind == Kind::grad ? p.memory.grad_offset[it.index]
                                   : p.memory.scratch_offset[it.index];
  };
  auto name = [&](const MemoryPlan::Interval& it) {
    using Kind = MemoryPlan::Interval::Kind;
    int v = it.kind == Kind::scratch ? p.memory.scratch_value.at(it.index) : it.index;
    return fmt::format("{} of '{}'",
                       it.kind == Kind::data   ? "data"
                       : it.kind == Kind::grad ? "gradient"
                                               : "summing scratch",
                       g.values.at(v).name);
  };
  for (size_t i = 0; i < iv.size(); ++i) {
    size_t oi = offset_of(iv[i]);
    if (oi == MemoryPlan::kDedicated || oi + iv[i].bytes > p.memory.arena_bytes)
      broken(fmt::format("the {} lies outside the {}-byte arena", name(iv[i]), p.memory.arena_bytes));
    for (size_t j = i + 1; j < iv.size(); ++j) {
      if (iv[i].start > iv[j].end || iv[j].start > iv[i].end) continue;
      size_t oj = offset_of(iv[j]);
      if (oi < oj + iv[j].bytes && oj < oi + iv[i].bytes)
        broken(fmt::format("the {} and the {} are live at the same time and overlap in the arena", name(iv[i]),
                           name(iv[j])));
    }
  }
}

}  // namespace bks
