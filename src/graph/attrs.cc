#include "graph/attrs.h"

#include <map>

#include "core/error.h"

namespace bks {

AttrStruct::~AttrStruct() = default;
AttrVisitor::~AttrVisitor() = default;

void visit_const(const AttrStruct& s, AttrVisitor& v) {
  // Read-only visitors never write through the references they are given.
  const_cast<AttrStruct&>(s).visit(v);
}

namespace {
constexpr const char* kVarianceNorms[] = {"FAN_IN", "FAN_OUT", "AVERAGE"};
}

void FillerSpec::visit(AttrVisitor& v) {
  v.field("type", type);
  v.field("value", value);
  v.field("min", min);
  v.field("max", max);
  v.field("mean", mean);
  v.field("std", std);
  v.field("sparse", sparse);
  v.field("variance_norm", variance_norm, kVarianceNorms);
}

FillerSpec filler_from_caffe(const proto::FillerParameter& f) {
  FillerSpec s;
  s.type = f.type();
  s.value = f.value();
  s.min = f.min();
  s.max = f.max();
  s.mean = f.mean();
  s.std = f.std();
  s.sparse = f.sparse();
  s.variance_norm = static_cast<int>(f.variance_norm());
  return s;
}

proto::FillerParameter filler_to_caffe(const FillerSpec& s) {
  proto::FillerParameter f;
  f.set_type(s.type);
  f.set_value(s.value);
  f.set_min(s.min);
  f.set_max(s.max);
  f.set_mean(s.mean);
  f.set_std(s.std);
  f.set_sparse(static_cast<int32_t>(s.sparse));
  f.set_variance_norm(static_cast<proto::FillerParameter::VarianceNorm>(s.variance_norm));
  return f;
}

void Attrs::wrong_type(const std::type_info& want) const {
  // typeid of a named reference: clang warns that typeid(*p_) evaluates its operand.
  const char* held = "(none)";
  if (p_) {
    const OpAttrs& attrs = *p_;
    held = typeid(attrs).name();
  }
  runtime_error("attributes of type {} asked for as {}", held, want.name());
}

namespace {
std::map<std::string, AttrsKind>& kinds() {
  static std::map<std::string, AttrsKind> k;
  return k;
}
}  // namespace

void register_attrs(const std::string& type, AttrsKind kind) { kinds()[type] = std::move(kind); }

const AttrsKind* find_attrs(const std::string& type) {
  auto it = kinds().find(type);
  return it == kinds().end() ? nullptr : &it->second;
}

Attrs attrs_from_caffe(const proto::LayerParameter& layer, const std::string& where) {
  const AttrsKind* kind = find_attrs(layer.type());
  if (!kind) return {};
  Attrs a(kind->make());
  kind->from_caffe(layer, *a.get(), where);
  return a;
}

Attrs default_attrs(const std::string& type) {
  const AttrsKind* kind = find_attrs(type);
  return kind ? Attrs(kind->make()) : Attrs();
}

std::vector<std::string> attrs_types() {
  std::vector<std::string> t;
  for (auto& [k, v] : kinds()) t.push_back(k);
  return t;
}

}  // namespace bks
