#include "ops/op.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
      bf16_(init.precision() == Precision::bf16) {}

Kernel::~Kernel() = default;

std::string Kernel::reported_name() const {
  std::string s = kernel_name();
  if (!slow_paths_.empty()) s += " [oneDNN ref (slow): " + fmt::format("{}", fmt::join(slow_paths_, ", ")) + "]";
  return s;
}

void Kernel::backward(OpCall&) { fail("has no backward pass"); }

dnnl::memory::desc Kernel::in_md(int i, const Shape& s) const {
  if (i < static_cast<int>(in_layout_.size()) && in_layout_[i].data.ndims > 0) return in_layout_[i];
  return plain_md(s);
}

dnnl::memory::desc Kernel::out_md(int j, const Shape& s) const {
  if (j < static_cast<int>(out_layout_.size()) && out_layout_[j].data.ndims > 0) return out_layout_[j];
  return plain_md(s);
}

Kernel::ChannelSplit Kernel::split_channels(const Shape& s) const { return context().split_channels(s); }

KernelRegistry& KernelRegistry::get() {
  static KernelRegistry r;
  return r;
}

void KernelRegistry::add(Entry e) {
  auto at = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.priority < e.priority; });
  entries_.insert(at, std::move(e));
}

std::vector<const KernelRegistry::Entry*> KernelRegistry::entries(const std::string& type) const {
  std::vector<const Entry*> r;
  for (const Entry& e : entries_)
    if (e.type == type) r.push_back(&e);
  return r;
}

bool KernelRegistry::has(const std::string& type) const { return !entries(type).empty(); }

void KernelRegistry::set_fallback(DeviceKind device, KernelFactory make) {
  fallbacks_.emplace_back(device, std::move(make));
}

void KernelRegistry::prefer(const std::string& type, const std::string& name) {
  if (!has(type)) input_error("--kernel {}={}: no layer type '{}'", type, name, type);
  std::vector<std::string> names;
  for (const Entry* e : entries(type)) {
    if (e->name == name) {
      preferred_.emplace_back(type, name);
      return;
    }
    if (std::find(names.begin(), names.end(), e->name) == names.end()) names.push_back(e->name);
  }
  input_error("--kernel {}={}: {} has no kernel '{}' (it has: {})", type, name, type, name, fmt::join(names, ", "));
}

std::unique_ptr<Kernel> KernelRegistry::create(const OpInit& init) const {
  DeviceKind dev = init.backend.device().kind;
  for (const auto& [type, name] : preferred_) {
    if (type != init.node.type) continue;
    for (const Entry& e : entries_)
      if (e.type == type && e.device == dev && e.name == name) {
        if (e.computes(init.precision()) && (!e.supports || e.supports(init))) return e.make(init);
        input_error("{}: --kernel {}={}: that kernel cannot run this layer", init.where, type, name);
      }
  }
  bool any_for_device = false, any_for_precision = false;
  for (const Entry& e : entries_) {
    if (e.type != init.node.type || e.device != dev) continue;
    any_for_device = true;
    if (!e.computes(init.precision())) continue;
    any_for_precision = true;
    if (!e.supports || e.supports(init)) return e.make(init);
  }
  if (dev != DeviceKind::cpu && has(init.node.type))
    for (const auto& [d, make] : fallbacks_)
      if (d == dev) return make(init);
  if (any_for_device && !any_for_precision)
    input_error("{}: no {} kernel of {} computes in {}", init.where, init.backend.device().str(), init.node.type,
                precision_name(init.precision()));
  if (any_for_device)
    input_error("{}: no {} kernel of {} supports this layer's settings", init.where, init.backend.device().str(),
                init.node.type);
  if (has(init.node.type))
    input_error("{}: layer '{}': type {} has no kernel for {}", init.where, init.node.name, init.node.type,
                init.backend.device().str());
  input_error("{}: layer '{}': unknown layer type '{}'", init.where, init.node.name, init.node.type);
}

}  // namespace bks
