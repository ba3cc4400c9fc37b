#include "runtime/net.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>

#include "backend/dnnl_util.h"
#include "core/device_memory.h"
#include "core/log.h"
#include "core/parallel.h"
#include "ops/shape_inference.h"
#include "runtime/param_binding.h"

namespace bks {
namespace {

// Sums over the whole buffer: blocked layouts keep their padding at zero, so this is right
// for every layout.
void add_into(Tensor& dst, const Tensor& src) {
  if (dst.device().kind != DeviceKind::cpu) {
    device_memory_ops(dst.device()).add(dst.f32(), src.f32(), dst.phys_numel(), dst.device());
    return;
  }
  float* d = dst.f32();
  const float* s = src.f32();
  parallel_ranges(dst.phys_numel(), [=](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) d[i] += s[i];
  });
}

}  // namespace

Net::Net(Graph graph, Phase phase, ParamStore& store, Backend& backend, uint64_t seed, NetOptions options)
    : graph_(std::move(graph)), phase_(phase), store_(store), backend_(backend), options_(std::move(options)) {
  if (!options_.arena) options_.arena = std::make_shared<Arena>();
  create_ops(seed);
  infer_shapes();
  bind_params(seed);
  facts_ = op_facts();
  plan_ = make_plan(graph_, facts_, phase_ == proto::TRAIN, options_.force_backward, node_params_, preferred_layout(),
                    options_.reuse_buffers);
  apply_plan();
}

Net::~Net() { options_.arena->remove_user(this); }

OpContext Net::context(int n) const { return OpContext{graph_.nodes[n], graph_.describe(n), phase_}; }

void Net::create_ops(uint64_t seed) {
  auto& reg = KernelRegistry::get();
  for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n) {
    defs_.push_back(&checked_def(graph_, n, phase_));
    OpInit init{graph_.nodes[n],
                graph_.describe(n),
                phase_,
                seed,
                backend_,
                options_.constant_params,
                options_.batch_stats_sum ? &options_.batch_stats_sum : nullptr,
                options_.blocked_activations};
    kernels_.push_back(reg.create(init));
  }
}

void Net::infer_shapes() {
  for (int n = 0; n < num_nodes(); ++n) {
    infer_node_shapes(graph_, n, phase_);
    kernels_[n]->reshape(input_shapes(graph_, n), output_shapes(graph_, n));
  }
}

void Net::bind_params(uint64_t seed) {
  node_params_ = bind_parameters(graph_, store_, seed, declared_params(graph_, phase_));
  for (const auto& np : node_params_)
    for (int idx : np)
      if (std::find(param_indices_.begin(), param_indices_.end(), idx) == param_indices_.end())
        param_indices_.push_back(idx);
}

std::vector<OpFacts> Net::op_facts() const {
  std::vector<OpFacts> facts(num_nodes());
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    OpFacts& f = facts[n];
    f = defs_[n]->facts(context(n), input_shapes(graph_, n));
    f.layout_rule = kernels_[n]->layout_rule();
    f.output_adds_onto_input = kernels_[n]->output_adds_onto_input();
    f.learnable = false;
    for (size_t i = 0; i < node_params_[n].size(); ++i)
      f.learnable = f.learnable || (store_.at(node_params_[n][i]).learnable && node.params[i].lr_mult != 0.f);
  }
  return facts;
}

PreferredLayout Net::preferred_layout() {
  // BKS_LAYOUTS=plain turns layout propagation off (for debugging and comparison).
  const char* env = std::getenv("BKS_LAYOUTS");
  if (env && std::string(env) == "plain")
    return [](int, int, const std::vector<dnnl::memory::desc>&) { return dnnl::memory::desc(); };
  return [this](int n, int j, const std::vector<dnnl::memory::desc>& in) {
    return kernels_[n]->preferred_output_layout(j, in);
  };
}

void Net::apply_plan() {
  const int nv = static_cast<int>(graph_.values.size());
  for (int n = 0; n < num_nodes(); ++n) {
    std::vector<dnnl::memory::desc> in, out;
    for (int v : graph_.nodes[n].inputs) in.push_back(plan_.layout[v]);
    for (int v : graph_.nodes[n].outputs) out.push_back(plan_.layout[v]);
    kernels_[n]->set_layouts(in, out);
    kernels_[n]->set_output_in_input_buffer(output_added_onto_input(n));
  }
  data_.assign(nv, Tensor());
  grad_.assign(nv, Tensor());
  skipped_.assign(num_nodes(), false);
  planned_value_bytes_.assign(nv, 0);
  for (int v = 0; v < nv; ++v) planned_value_bytes_[v] = plan_.buffer_bytes(graph_, v);
  const Device dev = backend_.device();
  for (int v = 0; v < nv; ++v)
    if (plan_.grad.has_grad[v]) grad_[v] = Tensor(Shape{0}, DType::f32, dev);
  if (on_device())
    for (int idx : param_indices_) {
      const Param& p = store_.at(idx);
      DeviceParam& dp = device_params_[idx];
      dp.data = Tensor(p.data.shape(), DType::f32, dev);
      if (p.learnable) dp.grad = Tensor(p.data.shape(), DType::f32, dev);
    }
  options_.arena->add_user(this, [this] { bind_to_arena(); });
  options_.arena->reserve(plan_.memory.arena_bytes, dev);  // rebinds every user of the arena, this net too
  bind_to_arena();
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    std::vector<Shape> in = input_shapes(graph_, n), out = output_shapes(graph_, n);
    kernels_[n]->set_needs_input_grad(plan_.grad.need_in_grad[n]);
    prepare_kernel(n);
    log::debug("{}: {} -> {} [{}]{}", graph_.describe(n), in.empty() ? "" : shape_str(in[0]),
               out.empty() ? "" : shape_str(out[0]), kernels_[n]->reported_name(),
               (!node.outputs.empty() && plan_.alias.data_alias[node.outputs[0]] >= 0) ? " (in place)" : "");
  }
  calls_.assign(num_nodes(), OpCall());
  size_t scratch_i = 0;
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    OpCall& c = calls_[n];
    for (int v : node.inputs) c.in.push_back(&data_[v]);
    for (int v : node.outputs) c.out.push_back(&data_[v]);
    for (int idx : node_params_[n])
      c.params.push_back(on_device() ? &device_params_.at(idx).data : &store_.at(idx).data);
    for (int v : node.outputs) c.out_grad.push_back(grad_[v].defined() ? &grad_[v] : nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      Tensor* g = nullptr;
      if (plan_.grad.need_in_grad[n][i])
        g = plan_.grad.accumulate_in_grad[n][i] ? &scratch_[scratch_i++] : &grad_[node.inputs[i]];
      c.in_grad.push_back(g);
    }
    c.param_grad.assign(node_params_[n].size(), nullptr);
  }
}

void Net::prepare_kernel(int n) {
  // Whatever oneDNN reference primitive the kernel builds is named, never silent.
  DnnlReferenceWatch watch;
  kernels_[n]->prepare(input_shapes(graph_, n), output_shapes(graph_, n));
  kernels_[n]->set_slow_paths(watch.found());
}

void Net::follow_data_batch(int n) {
  const Node& node = graph_.nodes[n];
  const int64_t batch = kernels_[n]->output_batch(calls_[n]);
  if (batch < 0) runtime_error("{}: the op gave no batch for its outputs", graph_.describe(n));
  if (node.outputs.empty() || graph_.values[node.outputs[0]].shape.at(0) == batch) return;
  const int nv = static_cast<int>(graph_.values.size());
  std::vector<bool> changed(nv, false), empty(nv, false);
  auto check_fits = [&](int m) {
    for (int v : graph_.nodes[m].outputs)
      if (static_cast<size_t>(shape_numel(graph_.values[v].shape)) * sizeof(float) > planned_value_bytes_[v])
        runtime_error("{}: top '{}' of shape {} outgrew the buffer planned for the largest batch", graph_.describe(m),
                      graph_.values[v].name, shape_str(graph_.values[v].shape));
  };
  for (int v : node.outputs) {
    graph_.values[v].shape.at(0) = batch;
    changed[v] = true;
    empty[v] = batch == 0;
  }
  check_fits(n);
  for (int m = n + 1; m < num_nodes(); ++m) {
    const Node& mn = graph_.nodes[m];
    auto any = [&](const std::vector<bool>& flag) {
      return std::any_of(mn.inputs.begin(), mn.inputs.end(), [&](int v) { return flag[v]; });
    };
    if (!any(changed)) continue;
    skipped_[m] = any(empty);
    for (int v : mn.outputs) changed[v] = true, empty[v] = skipped_[m];
    if (skipped_[m]) continue;
    infer_node_shapes(graph_, m, phase_);
    check_fits(m);
    kernels_[m]->reshape(input_shapes(graph_, m), output_shapes(graph_, m));
    prepare_kernel(m);
  }
  bind_to_arena();
}

void Net::bind_to_arena() {
  const auto& storage = options_.arena->storage();
  auto bind = [&](Tensor& t, size_t off, const Shape& s, size_t phys, DType dtype) {
    if (off != MemoryPlan::kDedicated) {
      t.bind(storage, off, s, phys, dtype);
      return;
    }
    // Own buffer: drop an arena binding first so reshape() cannot land inside the arena.
    if (storage && t.uses_storage(storage.get())) t = Tensor();
    if (t.device() != backend_.device()) t = Tensor(Shape{0}, DType::f32, backend_.device());
    t.reshape(s, phys, dtype);
  };
  // A value shares the buffer of the value it aliases, bound first: an earlier one (in
  // place) or a later one (a Concat's output, which its inputs are runs of). The chain of
  // aliases is walked with a loop, then bound from its end back: a crafted net can make it
  // as long as the net (nested Concats), too deep to recurse.
  const int nv = static_cast<int>(graph_.values.size());
  std::vector<bool> bound(nv, false);
  std::vector<int> chain;
  auto bind_data = [&](int v) {
    chain.clear();
    for (int u = v; u >= 0 && !bound[u]; u = plan_.alias.data_alias[u]) {
      bound[u] = true;
      chain.push_back(u);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const int u = *it;
      const Shape& s = graph_.values[u].shape;
      if (int a = plan_.alias.data_alias[u]; a >= 0)
        data_[u].alias_of(data_[a], s, plan_.alias.data_alias_offset[u]);
      else
        bind(data_[u], plan_.memory.data_offset[u], s, plan_.blocked_bytes(u), value_dtype(u));
    }
  };
  for (int v = 0; v < nv; ++v) {
    const Shape& s = graph_.values[v].shape;
    size_t phys = plan_.blocked_bytes(v);
    bind_data(v);
    if (!grad_[v].defined()) continue;
    if (plan_.alias.grad_alias[v] >= 0)
      grad_[v].alias_of(grad_[plan_.alias.grad_alias[v]], s);
    else
      bind(grad_[v], plan_.memory.grad_offset[v], s, phys, DType::f32);
  }
  size_t k = 0;
  for (int n = 0; n < num_nodes(); ++n)
    for (size_t i = 0; i < graph_.nodes[n].inputs.size(); ++i)
      if (plan_.grad.accumulate_in_grad[n][i]) {
        int v = graph_.nodes[n].inputs[i];
        if (k == scratch_.size()) scratch_.emplace_back(Shape{0}, DType::f32, backend_.device());
        bind(scratch_[k], plan_.memory.scratch_offset[k], graph_.values[v].shape, plan_.blocked_bytes(v), DType::f32);
        ++k;
      }
}

float Net::forward(int64_t step) {
  backend_.enter();
  if (on_device()) upload_params();
  for (int n = 0; n < num_nodes(); ++n) {
    calls_[n].step = step;
    if (skipped_[n]) {
      for (Tensor* t : calls_[n].out) t->zero();
      continue;
    }
    double t0 = profiler_ ? now_us() : 0.0;  // reshaping what follows counts as the node's time
    if (facts_[n].batch_from_data) follow_data_batch(n);
    kernels_[n]->forward(calls_[n]);
    if (profiler_) profiler_->record(n, graph_.nodes[n].name, Profiler::Pass::forward, t0, now_us());
    if (debug_info_) forward_debug_info(n);
    if (forward_hook_) forward_hook_(n);
  }
  if (on_device() && phase_ == proto::TRAIN) download_changed_params();
  double loss = 0.0;
  for (int v = 0; v < static_cast<int>(plan_.grad.loss_weight.size()); ++v) {
    if (plan_.grad.loss_weight[v] == 0.f) continue;
    Tensor h = host_value(v);
    const float* p = h.f32();
    double s = 0.0;
    for (int64_t i = 0; i < h.numel(); ++i) s += p[i];
    loss += plan_.grad.loss_weight[v] * s;
  }
  return static_cast<float>(loss);
}

void Net::backward() {
  backend_.enter();
  for (int v = 0; v < static_cast<int>(plan_.grad.loss_weight.size()); ++v)
    if (plan_.grad.loss_weight[v] != 0.f && grad_[v].defined()) {
      if (!on_device()) {
        grad_[v].fill(plan_.grad.loss_weight[v]);
        continue;
      }
      Tensor w(grad_[v].shape());  // a scalar or so: filled here, copied over
      w.fill(plan_.grad.loss_weight[v]);
      grad_[v].copy_from(w);
    }
  for (auto& [idx, dp] : device_params_) dp.written = false;
  for (int n = num_nodes() - 1; n >= 0; --n) {
    const Node& node = graph_.nodes[n];
    OpCall& c = calls_[n];
    if (!plan_.grad.runs_backward[n]) continue;
    if (skipped_[n]) {
      skipped_backward(n);
      continue;
    }
    for (size_t i = 0; i < node_params_[n].size(); ++i) {
      Param& p = store_.at(node_params_[n][i]);
      if (!p.learnable || node.params[i].lr_mult == 0.f) {
        c.param_grad[i] = nullptr;
        continue;
      }
      if (on_device()) {  // this pass's sum on the device; the store's is added to on download
        DeviceParam& dp = device_params_.at(node_params_[n][i]);
        if (dp.written && !dp.scratch.defined()) dp.scratch = Tensor(p.data.shape(), DType::f32, backend_.device());
        c.param_grad[i] = dp.written ? &dp.scratch : &dp.grad;
        continue;
      }
      if (p.grad_written && !p.scratch.defined()) p.scratch = Tensor(p.data.shape());
      c.param_grad[i] = p.grad_written ? &p.scratch : &p.grad;
    }
    double t0 = profiler_ ? now_us() : 0.0;
    kernels_[n]->backward(c);
    if (profiler_) profiler_->record(n, node.name, Profiler::Pass::backward, t0, now_us());
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (plan_.grad.accumulate_in_grad[n][i]) add_into(grad_[node.inputs[i]], *c.in_grad[i]);
    for (size_t i = 0; i < node_params_[n].size(); ++i) {
      if (!c.param_grad[i]) continue;
      if (on_device()) {
        DeviceParam& dp = device_params_.at(node_params_[n][i]);
        if (c.param_grad[i] == &dp.scratch) add_into(dp.grad, dp.scratch);
        dp.written = true;
        continue;
      }
      Param& p = store_.at(node_params_[n][i]);
      if (c.param_grad[i] == &p.scratch) add_into(p.grad, p.scratch);
      p.grad_written = true;
    }
    if (debug_info_) backward_debug_info(n);
    if (on_device())
      for (int idx : plan_.grad.grad_ready_after[n]) download_grad(idx);
    if (grad_ready_)
      for (int idx : plan_.grad.grad_ready_after[n]) grad_ready_(idx);
  }
  for (auto& [idx, dp] : device_params_) download_grad(idx);  // any the plan did not list
  if (debug_info_) backward_norms_debug_info();
}

// A node that read an empty batch contributes nothing: the gradients it would have written
// first are zero, its parameters' too when no other node wrote them.
void Net::skipped_backward(int n) {
  const Node& node = graph_.nodes[n];
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (plan_.grad.need_in_grad[n][i] && !plan_.grad.accumulate_in_grad[n][i]) grad_[node.inputs[i]].zero();
  for (size_t i = 0; i < node_params_[n].size(); ++i) {
    Param& p = store_.at(node_params_[n][i]);
    if (!p.learnable || node.params[i].lr_mult == 0.f || p.grad_written) continue;
    p.grad.zero();
    p.grad_written = true;
  }
  if (grad_ready_)
    for (int idx : plan_.grad.grad_ready_after[n]) grad_ready_(idx);
}

std::vector<int> Net::grad_ready_order() const {
  std::vector<int> order;
  for (int n = num_nodes() - 1; n >= 0; --n)
    if (plan_.grad.runs_backward[n])
      for (int idx : plan_.grad.grad_ready_after[n]) order.push_back(idx);
  return order;
}

Tensor Net::host_value(int v) { return on_device() ? to_device(data_[v], Device{}) : data_[v]; }

void Net::upload_params() {
  for (auto& [idx, dp] : device_params_) dp.data.copy_from(store_.at(idx).data);
}

void Net::download_changed_params() {
  for (auto& [idx, dp] : device_params_)
    if (!store_.at(idx).learnable) store_.at(idx).data.copy_from(dp.data);
}

void Net::download_grad(int idx) {
  DeviceParam& dp = device_params_.at(idx);
  if (!dp.written) return;
  dp.written = false;
  Param& p = store_.at(idx);
  if (p.grad_written)  // earlier micro-batches of this iteration (iter_size)
    add_into(p.grad, to_device(dp.grad, Device{}));
  else
    p.grad.copy_from(dp.grad);
  p.grad_written = true;
}

void Net::set_debug_info(bool on) {
  if (on && on_device()) input_error("{}: debug_info runs on the CPU only so far", graph_.source);
  debug_info_ = on;
}

Tensor& Net::value(const std::string& name) {
  int v = graph_.find_value(name);
  if (v < 0) input_error("{}: no blob named '{}'", graph_.source, name);
  return data_[v];
}

std::vector<int> Net::inputs() const {
  std::vector<int> in;
  for (int n = 0; n < num_nodes(); ++n)
    if (facts_[n].external_input)
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
  dnnl::memory from(plan_.layout[v], be.engine(), src.raw());
  dnnl::memory to(plain_md(out.shape()), be.engine(), out.raw());
  make_reorder(from, to).execute(be.stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  be.stream().wait();
  return out;
}

DType Net::value_dtype(int v) const {
  if (!is_blocked(v)) return DType::f32;
  switch (plan_.layout[v].data_type()) {
    case dnnl::memory::data_type::s8: return DType::s8;
    case dnnl::memory::data_type::u8: return DType::u8;
    case dnnl::memory::data_type::bf16: return DType::bf16;
    default: return DType::f32;
  }
}

int Net::first_data_layer() const {
  for (int n = 0; n < num_nodes(); ++n)
    if (kernels_[n]->dataset_size() > 0 && !graph_.nodes[n].outputs.empty()) return n;
  return -1;
}

std::pair<int64_t, int64_t> Net::data_extent() const {
  if (const int n = first_data_layer(); n >= 0) {
    const int64_t items = kernels_[n]->items_per_batch();
    return {items > 0 ? items : data_[graph_.nodes[n].outputs[0]].dim(0), kernels_[n]->dataset_size()};
  }
  // No data layer: the batch is the first axis of the first Input blob.
  for (int n = 0; n < num_nodes(); ++n)
    if (facts_[n].external_input && !graph_.nodes[n].outputs.empty()) {
      const Tensor& t = data_[graph_.nodes[n].outputs[0]];
      return {t.ndim() > 0 ? t.dim(0) : 1, 0};
    }
  return {0, 0};
}

std::string Net::data_unit() const {
  const int n = first_data_layer();
  return n >= 0 ? kernels_[n]->item_unit() : "images";
}

bool Net::output_added_onto_input(int n) const {
  const Node& node = graph_.nodes[n];
  const int i = kernels_[n]->output_adds_onto_input();
  return i >= 0 && i < static_cast<int>(node.inputs.size()) && !node.outputs.empty() &&
         plan_.alias.data_alias[node.outputs[0]] == node.inputs[i];
}

std::string Net::buffer_note(int n) const {
  const Node& node = graph_.nodes[n];
  const int a = node.outputs.empty() ? -1 : plan_.alias.data_alias[node.outputs[0]];
  if (a < 0) return "";
  const std::string& name = graph_.values[a].name;
  if (graph_.values[a].producer > n) return fmt::format(" written into {}", name);
  return output_added_onto_input(n) ? fmt::format(" added onto {}", name) : std::string(" in-place");
}

std::string Net::describe() const {
  std::string s;
  for (int n = 0; n < num_nodes(); ++n) {
    const Node& node = graph_.nodes[n];
    std::vector<std::string> outs;
    for (int v : node.outputs)
      outs.push_back(fmt::format("{} {}", graph_.values[v].name, shape_str(graph_.values[v].shape)));
    bool first_out = !node.outputs.empty();
    s += fmt::format("  {:<16} {:<22} -> {:<40} [{}]{}{}{}\n", node.name, node.type, fmt::join(outs, ", "),
                     kernels_[n]->reported_name(), buffer_note(n),
                     !first_out || !is_blocked(node.outputs[0])    ? ""
                     : value_dtype(node.outputs[0]) == DType::f32  ? " blocked-layout"
                     : value_dtype(node.outputs[0]) == DType::u8   ? " u8 output"
                     : value_dtype(node.outputs[0]) == DType::bf16 ? " bf16 output"
                                                                   : " s8 output",
                     plan_.grad.runs_backward[n] ? "" : " (no backward)");
  }
  return s;
}

}  // namespace bks
