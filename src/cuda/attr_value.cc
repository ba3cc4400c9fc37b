#include "cuda/attr_value.h"

#include <cstring>
#include <type_traits>

#include "graph/attrs.h"

namespace bks::cuda {

namespace {

// Copies the field called `name` (of type T) into `out`; other fields are passed over.
template <class T>
class FieldReader final : public AttrVisitor {
 public:
  FieldReader(const char* name, T& out) : name_(name), out_(out) {}
  void field(const char* name, float& v) override { take(name, v); }
  void field(const char* name, int64_t& v) override { take(name, v); }
  void field(const char*, bool&) override {}
  void field(const char*, std::string&) override {}
  void field(const char*, std::vector<int64_t>&) override {}
  void field(const char*, std::vector<float>&) override {}
  void field(const char*, std::vector<std::string>&) override {}
  void field(const char*, AttrStruct&) override {}
  void field(const char*, int&, std::span<const char* const>) override {}

 private:
  template <class U>
  void take(const char* name, U& v) {
    if constexpr (std::is_same_v<T, U>)
      if (std::strcmp(name, name_) == 0) out_ = v;
  }
  const char* name_;
  T& out_;
};

template <class T>
T read(const Node& n, const char* name, T fallback) {
  T v = fallback;
  if (const OpAttrs* a = n.attrs.get()) {
    FieldReader<T> r(name, v);
    visit_const(*a, r);
  }
  return v;
}

}  // namespace

float attr_float(const Node& n, const char* name, float fallback) { return read(n, name, fallback); }
int64_t attr_int(const Node& n, const char* name, int64_t fallback) { return read(n, name, fallback); }

}  // namespace bks::cuda
