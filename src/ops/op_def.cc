#include "ops/op_def.h"

#include <algorithm>

namespace bks {

OpDef::~OpDef() = default;

OpFacts no_backward_facts() {
  OpFacts f;
  f.has_backward = false;
  return f;
}

OpFacts loss_facts(size_t inputs) {
  OpFacts f;
  f.default_loss_weight = 1.f;
  f.can_propagate_to.assign(inputs, false);
  if (inputs > 0) f.can_propagate_to[0] = true;
  return f;
}

OpTraits traits_with(std::initializer_list<bool OpTraits::*> flags) {
  OpTraits t;
  for (auto flag : flags) t.*flag = true;
  return t;
}

void become(Node& n, const std::string& type) {
  n.type = type;
  n.attrs = default_attrs(type);
}

void OpContext::expect_ndim(const Shape& s, int lo, int hi, const char* what) const {
  int n = static_cast<int>(s.size());
  if (n < lo || n > hi) {
    if (lo == hi) fail("{} must be {}-d, got {}", what, lo, shape_str(s));
    fail("{} must have {} to {} axes, got {}", what, lo, hi, shape_str(s));
  }
}

OpContext::ChannelSplit OpContext::split_channels(const Shape& s) const {
  if (s.size() < 2) fail("bottom must have at least 2 axes, got {}", shape_str(s));
  return {s[0], s[1], shape_count(s, 2, static_cast<int>(s.size()))};
}

OpDefRegistry& OpDefRegistry::get() {
  static OpDefRegistry r;
  return r;
}

void OpDefRegistry::add(const std::string& type, std::unique_ptr<OpDef> def) { defs_[type] = std::move(def); }

const OpDef* OpDefRegistry::find(const std::string& type) const {
  auto it = defs_.find(type);
  return it == defs_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpDefRegistry::types() const {
  std::vector<std::string> t;
  for (auto& [type, def] : defs_) t.push_back(type);
  return t;
}

const OpDef& op_def(const Graph& g, int n) {
  const OpDef* d = OpDefRegistry::get().find(g.nodes.at(n).type);
  if (!d) input_error("{}: unknown layer type '{}'", g.describe(n), g.nodes[n].type);
  return *d;
}

ChannelFlow OpDef::channel_flow(const Node& n, const std::vector<Shape>&) const {
  return traits(n).elementwise ? ChannelFlow::per_channel : ChannelFlow::blocks;
}

OpTraits op_traits(const Node& n) {
  const OpDef* d = OpDefRegistry::get().find(n.type);
  return d ? d->traits(n) : OpTraits{};
}

OpTraits op_traits(const proto::LayerParameter& layer) {
  Node n;
  n.type = layer.type();
  try {
    n.attrs = attrs_from_caffe(layer, layer.name());
  } catch (const InputError&) {
    n.attrs = default_attrs(n.type);  // traits of a layer the front end will reject later
  }
  return op_traits(n);
}

}  // namespace bks
