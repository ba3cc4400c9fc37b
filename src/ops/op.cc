#include "ops/op.h"

#include <algorithm>

#include "backend/dnnl_util.h"

namespace bks {

Op::Op(const OpInit& init)
    : name_(init.node.name),
      where_(init.where),
      phase_(init.phase),
      seed_(init.seed),
      backend_(init.backend),
      constant_params_(init.constant_params),
      bf16_(init.bf16) {}

Op::~Op() = default;

void Op::backward(OpCall&) { fail("has no backward pass"); }

dnnl::memory::desc Op::in_md(int i, const Shape& s) const {
  if (i < static_cast<int>(in_layout_.size()) && in_layout_[i].data.ndims > 0) return in_layout_[i];
  return plain_md(s);
}

dnnl::memory::desc Op::out_md(int j, const Shape& s) const {
  if (j < static_cast<int>(out_layout_.size()) && out_layout_[j].data.ndims > 0) return out_layout_[j];
  return plain_md(s);
}

void Op::expect_ndim(const Shape& s, int lo, int hi, const char* what) const {
  int n = static_cast<int>(s.size());
  if (n < lo || n > hi) {
    if (lo == hi) fail("{} must be {}-d, got {}", what, lo, shape_str(s));
    fail("{} must have {} to {} axes, got {}", what, lo, hi, shape_str(s));
  }
}

void Op::read_int8_thresholds(const OpInit& init, float& in, float& out) const {
  in = init.node.param.int8_input_threshold();
  out = init.node.param.int8_output_threshold();
  if (in < 0.f) fail("int8_input_threshold must be positive");
  if (in > 0.f && init.phase == proto::TRAIN) fail("int8_input_threshold is for inference graphs, not TRAIN");
  if (out < 0.f) fail("int8_output_threshold must be positive");
  if (out > 0.f && !(in > 0.f)) fail("int8_output_threshold needs int8_input_threshold");
}

Op::ChannelSplit Op::split_channels(const Shape& s) const {
  if (s.size() < 2) fail("bottom must have at least 2 axes, got {}", shape_str(s));
  return {s[0], s[1], shape_count(s, 2, static_cast<int>(s.size()))};
}

OpRegistry& OpRegistry::get() {
  static OpRegistry r;
  return r;
}

void OpRegistry::add(const std::string& type, DeviceKind dev, OpFactory f) {
  entries_.emplace_back(type, dev, std::move(f));
}

bool OpRegistry::has(const std::string& type) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](auto& e) { return std::get<0>(e) == type; });
}

std::vector<std::string> OpRegistry::types() const {
  std::vector<std::string> t;
  for (auto& e : entries_) t.push_back(std::get<0>(e));
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  return t;
}

std::unique_ptr<Op> OpRegistry::create(const OpInit& init) const {
  DeviceKind dev = init.backend.device().kind;
  for (auto& [type, d, f] : entries_)
    if (type == init.node.type && d == dev) return f(init);
  if (has(init.node.type))
    input_error("{}: layer '{}': type {} has no kernel for {}", init.where, init.node.name, init.node.type,
                init.backend.device().str());
  input_error("{}: layer '{}': unknown layer type '{}'", init.where, init.node.name, init.node.type);
}

}  // namespace bks
