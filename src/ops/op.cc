#include "ops/op.h"

#include <algorithm>

#include "backend/dnnl_util.h"

namespace bks {

Kernel::Kernel(const OpInit& init)
    : node_(init.node),
      name_(init.node.name),
      where_(init.where),
      phase_(init.phase),
      seed_(init.seed),
      backend_(init.backend),
      constant_params_(init.constant_params),
      bf16_(init.bf16) {}

Kernel::~Kernel() = default;

void Kernel::backward(OpCall&) { fail("has no backward pass"); }

dnnl::memory::desc Kernel::in_md(int i, const Shape& s) const {
  if (i < static_cast<int>(in_layout_.size()) && in_layout_[i].data.ndims > 0) return in_layout_[i];
  return plain_md(s);
}

dnnl::memory::desc Kernel::out_md(int j, const Shape& s) const {
  if (j < static_cast<int>(out_layout_.size()) && out_layout_[j].data.ndims > 0) return out_layout_[j];
  return plain_md(s);
}

void Kernel::expect_ndim(const Shape& s, int lo, int hi, const char* what) const {
  context().expect_ndim(s, lo, hi, what);
}

void Kernel::read_int8_thresholds(const OpInit& init, float& in, float& out) const {
  in = init.node.param.int8_input_threshold();
  out = init.node.param.int8_output_threshold();
  if (in < 0.f) fail("int8_input_threshold must be positive");
  if (in > 0.f && init.phase == proto::TRAIN) fail("int8_input_threshold is for inference graphs, not TRAIN");
  if (out < 0.f) fail("int8_output_threshold must be positive");
  if (out > 0.f && !(in > 0.f)) fail("int8_output_threshold needs int8_input_threshold");
}

Kernel::ChannelSplit Kernel::split_channels(const Shape& s) const { return context().split_channels(s); }

OpFacts Op::facts(size_t inputs) const {
  OpFacts f;
  f.has_backward = has_backward();
  f.allows_inplace = allows_inplace();
  f.backward_reads_input = backward_reads_input();
  f.backward_reads_output = backward_reads_output();
  for (size_t i = 0; i < inputs; ++i) {
    f.reads_input_in_backward.push_back(backward_reads_input_at(static_cast<int>(i)));
    f.can_propagate_to.push_back(can_propagate_to(static_cast<int>(i)));
  }
  f.output_is_view = output_is_view();
  f.external_input = is_external_input();
  f.input_runs_in_output = input_runs_in_output();
  f.default_loss_weight = default_loss_weight();
  return f;
}

KernelRegistry& KernelRegistry::get() {
  static KernelRegistry r;
  return r;
}

void KernelRegistry::add(Entry e) {
  auto at = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.priority < e.priority; });
  entries_.insert(at, std::move(e));
}

void KernelRegistry::add_op(const std::string& type, DeviceKind dev, OpFactory f) {
  ops_.emplace_back(type, dev, std::move(f));
}

std::vector<const KernelRegistry::Entry*> KernelRegistry::entries(const std::string& type) const {
  std::vector<const Entry*> r;
  for (const Entry& e : entries_)
    if (e.type == type) r.push_back(&e);
  return r;
}

bool KernelRegistry::has(const std::string& type) const {
  return !entries(type).empty() ||
         std::any_of(ops_.begin(), ops_.end(), [&](auto& e) { return std::get<0>(e) == type; });
}

std::vector<std::string> KernelRegistry::types() const {
  std::vector<std::string> t;
  for (auto& e : entries_) t.push_back(e.type);
  for (auto& e : ops_) t.push_back(std::get<0>(e));
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

std::unique_ptr<Op> KernelRegistry::create_op(const OpInit& init) const {
  DeviceKind dev = init.backend.device().kind;
  for (auto& [type, d, f] : ops_)
    if (type == init.node.type && d == dev) return f(init);
  return nullptr;
}

std::unique_ptr<Kernel> KernelRegistry::create(const OpInit& init) const {
  if (auto op = create_op(init)) return op;
  DeviceKind dev = init.backend.device().kind;
  bool any_for_device = false;
  for (const Entry& e : entries_) {
    if (e.type != init.node.type || e.device != dev) continue;
    any_for_device = true;
    if (!e.supports || e.supports(init)) return e.make(init);
  }
  if (any_for_device)
    input_error("{}: no {} kernel of {} supports this layer's settings", init.where, init.backend.device().str(),
                init.node.type);
  if (has(init.node.type))
    input_error("{}: layer '{}': type {} has no kernel for {}", init.where, init.node.name, init.node.type,
                init.backend.device().str());
  input_error("{}: layer '{}': unknown layer type '{}'", init.where, init.node.name, init.node.type);
}

}  // namespace bks
