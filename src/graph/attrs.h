// Typed attributes of graph nodes.
//
// Each op type has one attribute struct (declared beside its definition in ops/), derived
// from OpAttrs, whose visit() names its fields to an AttrVisitor. Visitors give every
// struct the same generic treatment without knowing it: JSON for bundles
// (formats/graph_json.cc), printing, comparison. Front ends convert their own formats to
// and from the structs (Caffe's LayerParameter: from_caffe / to_caffe, registered with the
// struct), so nothing past the front end speaks a file format's schema.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "caffe.pb.h"

namespace bks {

class AttrVisitor;

// A struct whose fields a visitor can read and write by name.
struct AttrStruct {
  virtual ~AttrStruct();
  virtual void visit(AttrVisitor& v) = 0;
};

class AttrVisitor {
 public:
  virtual ~AttrVisitor();
  virtual void field(const char* name, bool& v) = 0;
  virtual void field(const char* name, int64_t& v) = 0;
  virtual void field(const char* name, float& v) = 0;
  virtual void field(const char* name, std::string& v) = 0;
  virtual void field(const char* name, std::vector<int64_t>& v) = 0;
  virtual void field(const char* name, std::vector<float>& v) = 0;
  virtual void field(const char* name, std::vector<std::string>& v) = 0;
  virtual void field(const char* name, AttrStruct& v) = 0;
  // An enumeration stored as an index into `names` (written and read by name).
  virtual void field(const char* name, int& v, std::span<const char* const> names) = 0;
};

// Visits a const struct with a visitor that only reads (writers: JSON, printing).
void visit_const(const AttrStruct& s, AttrVisitor& v);

// A weight initialiser, as Caffe's FillerParameter describes one.
struct FillerSpec final : AttrStruct {
  enum VarianceNorm { fan_in, fan_out, average };
  std::string type = "constant";
  float value = 0.f;
  float min = 0.f, max = 1.f;
  float mean = 0.f, std = 1.f;
  int64_t sparse = -1;
  int variance_norm = fan_in;
  void visit(AttrVisitor& v) override;
};
FillerSpec filler_from_caffe(const proto::FillerParameter& f);
proto::FillerParameter filler_to_caffe(const FillerSpec& f);

// The attributes of one op type.
struct OpAttrs : AttrStruct {
  virtual std::unique_ptr<OpAttrs> clone() const = 0;
};

// Base of an op's attribute struct T: gives it clone().
template <class T>
struct AttrsOf : OpAttrs {
  std::unique_ptr<OpAttrs> clone() const override { return std::make_unique<T>(static_cast<const T&>(*this)); }
};

// A node's attributes: owned, deep-copied with the node; empty for types without any.
class Attrs {
 public:
  Attrs() = default;
  explicit Attrs(std::unique_ptr<OpAttrs> p) : p_(std::move(p)) {}
  Attrs(const Attrs& o) : p_(o.p_ ? o.p_->clone() : nullptr) {}
  Attrs& operator=(const Attrs& o) {
    if (this != &o) p_ = o.p_ ? o.p_->clone() : nullptr;
    return *this;
  }
  Attrs(Attrs&&) noexcept = default;
  Attrs& operator=(Attrs&&) noexcept = default;

  explicit operator bool() const { return p_ != nullptr; }
  const OpAttrs* get() const { return p_.get(); }
  OpAttrs* get() { return p_.get(); }
  // The attributes as the op's struct T; RuntimeError when the node holds no T (an op
  // asking for another op's attributes is a bug, not bad input).
  template <class T>
  const T& as() const {
    const T* t = dynamic_cast<const T*>(p_.get());
    if (!t) wrong_type(typeid(T));
    return *t;
  }
  template <class T>
  T& as() {
    T* t = dynamic_cast<T*>(p_.get());
    if (!t) wrong_type(typeid(T));
    return *t;
  }

 private:
  [[noreturn]] void wrong_type(const std::type_info& want) const;
  std::unique_ptr<OpAttrs> p_;
};

// How to make an op type's attributes, and how Caffe's front end reads and writes them.
struct AttrsKind {
  std::function<std::unique_ptr<OpAttrs>()> make;  // defaults
  // Reads the layer's own fields (`where` prefixes errors: file:line, layer, type).
  std::function<void(const proto::LayerParameter&, OpAttrs&, const std::string& where)> from_caffe;
  std::function<void(const OpAttrs&, proto::LayerParameter&)> to_caffe;
};
void register_attrs(const std::string& type, AttrsKind kind);
// Null when the type registered no attributes.
const AttrsKind* find_attrs(const std::string& type);
// A Caffe layer's attributes (empty when its type registered none); InputError prefixed
// with `where` when a field is out of its range.
Attrs attrs_from_caffe(const proto::LayerParameter& layer, const std::string& where);
// The default attributes of a type (empty when it registered none).
Attrs default_attrs(const std::string& type);
// Every type that registered attributes.
std::vector<std::string> attrs_types();

// Registers attribute struct T for an op type, with its Caffe converters
// (void from(const proto::LayerParameter&, T&, const std::string& where) and
// void to(const T&, proto::LayerParameter&)).
template <class T>
struct AttrsRegistrar {
  AttrsRegistrar(const char* type, void (*from)(const proto::LayerParameter&, T&, const std::string&),
                 void (*to)(const T&, proto::LayerParameter&)) {
    register_attrs(type,
                   AttrsKind{[] { return std::make_unique<T>(); },
                             [from](const proto::LayerParameter& l, OpAttrs& a, const std::string& w) {
                               from(l, static_cast<T&>(a), w);
                             },
                             [to](const OpAttrs& a, proto::LayerParameter& l) { to(static_cast<const T&>(a), l); }});
  }
};
#define BKS_REGISTER_ATTRS_IMPL2(type, T, from, to, line) \
  static ::bks::AttrsRegistrar<T> bks_attrs_registrar_##line(type, from, to)
#define BKS_REGISTER_ATTRS_IMPL(type, T, from, to, line) BKS_REGISTER_ATTRS_IMPL2(type, T, from, to, line)
#define BKS_REGISTER_ATTRS(type, T, from, to) BKS_REGISTER_ATTRS_IMPL(type, T, from, to, __LINE__)

}  // namespace bks
