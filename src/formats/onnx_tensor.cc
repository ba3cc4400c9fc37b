// TensorProto -> Const: every size is checked against the data present before allocating,
// so a crafted file fails with a message instead of a huge allocation or a read past the end.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include "formats/onnx_ops.h"

namespace bks::onnx_import {

std::vector<int64_t> Const::ints(const std::string& where) const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (size_t k = 0; k < v.size(); ++k) {
    if (integer) {
      v[k] = i[k];
      continue;
    }
    const float x = f.f32()[k];
    // 2^63 is the first float past int64's range.
    if (!(x > -9.2233720368547758e18f && x < 9.2233720368547758e18f))
      input_error("{}: the float constant value {} is no integer (not finite, or beyond 64 bits)", where, x);
    v[k] = static_cast<int64_t>(x);
  }
  return v;
}

Const int_const(Shape shape, std::vector<int64_t> v) {
  Const c;
  c.shape = std::move(shape);
  c.integer = true;
  c.i = std::move(v);
  return c;
}

Const float_const(Shape shape) {
  Const c;
  c.shape = shape;
  c.f = Tensor(shape.empty() ? Shape{1} : shape);
  return c;
}

Const reshaped(const Const& c, Shape shape) {
  Const r = c;
  r.shape = shape;
  if (!c.integer) r.f = c.f.view(shape.empty() ? Shape{1} : shape);
  return r;
}

namespace {

// Element count of `dims`, or -1 when negative or beyond 2^40 elements.
int64_t checked_numel(const google::protobuf::RepeatedField<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) return -1;
    n *= d;
  }
  return n;
}

size_t elem_size(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32: return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::DOUBLE: return 8;
    default: return 0;
  }
}

// The bytes of an initializer kept in a file beside the model.
std::string external_bytes(const onnx::TensorProto& t, const std::string& what, const std::string& dir,
                           size_t want) {
  namespace fs = std::filesystem;
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      input_error("{}: external data '{}' is '{}', not a number", what, kv.key(), kv.value());
    }
  }
  if (location.empty()) input_error("{}: external data without a 'location'", what);
  fs::path rel(location);
  // The spec's locations are relative to the model; one that climbs out is refused.
  if (rel.is_absolute() || std::find(rel.begin(), rel.end(), "..") != rel.end())
    input_error("{}: external data location '{}' must be a path below the model's folder", what, location);
  fs::path p = fs::path(dir) / rel;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec))
    input_error("{}: its data is in external file '{}', which does not exist ({})", what, location, p.string());
  const auto size = static_cast<int64_t>(fs::file_size(p, ec));
  if (length < 0) length = size - offset;
  if (offset < 0 || length != static_cast<int64_t>(want) || offset > size || size - offset < length)
    input_error("{}: external file '{}' holds {} bytes from offset {}, expected {} ({} in the file)", what, location,
                length, offset, want, size);
  std::ifstream f(p, std::ios::binary);
  std::string bytes(want, '\0');
  f.seekg(offset);
  if (!f.read(bytes.data(), static_cast<std::streamsize>(want)))
    input_error("{}: cannot read external file '{}'", what, location);
  return bytes;
}

}  // namespace

Const read_tensor(const onnx::TensorProto& t, const std::string& what, const std::string& model_dir) {
  const int64_t n = checked_numel(t.dims());
  if (n < 0) input_error("{}: dims {} are negative or too large", what, fmt::join(t.dims(), "x"));
  const size_t es = elem_size(t.data_type());
  if (es == 0)
    input_error("{}: element type {} is not supported (FLOAT, DOUBLE, INT32 and INT64 are)", what,
                onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t.data_type())));
  if (t.has_segment()) input_error("{}: segmented tensors are not supported", what);
  Shape shape(t.dims().begin(), t.dims().end());
  const bool integer = t.data_type() == onnx::TensorProto::INT32 || t.data_type() == onnx::TensorProto::INT64;
  const size_t want = static_cast<size_t>(n) * es;
  std::string ext;
  const std::string* raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    ext = external_bytes(t, what, model_dir, want);
    raw = &ext;
  } else if (!t.raw_data().empty()) {
    raw = &t.raw_data();
  }
  int64_t typed = 0;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: typed = t.float_data_size(); break;
    case onnx::TensorProto::INT32: typed = t.int32_data_size(); break;
    case onnx::TensorProto::INT64: typed = t.int64_data_size(); break;
    case onnx::TensorProto::DOUBLE: typed = t.double_data_size(); break;
  }
  if (raw && raw->size() != want)
    input_error("{}: {} bytes of data for dims [{}] ({} bytes expected)", what, raw->size(), fmt::join(shape, ","),
                want);
  if (!raw && typed != n)
    input_error("{}: {} values for dims [{}] ({} expected)", what, typed, fmt::join(shape, ","), n);

  Const c = integer ? int_const(shape, std::vector<int64_t>(static_cast<size_t>(n))) : float_const(shape);
  // Little-endian data, read on a little-endian host (x86-64, AArch64).
  auto get = [&](int64_t k) -> double {
    if (raw) {
      const char* p = raw->data() + k * static_cast<int64_t>(es);
      switch (t.data_type()) {
        case onnx::TensorProto::FLOAT: { float v; std::memcpy(&v, p, 4); return v; }
        case onnx::TensorProto::INT32: { int32_t v; std::memcpy(&v, p, 4); return static_cast<double>(v); }
        case onnx::TensorProto::DOUBLE: { double v; std::memcpy(&v, p, 8); return v; }
        default: return 0;
      }
    }
    switch (t.data_type()) {
      case onnx::TensorProto::FLOAT: return t.float_data(static_cast<int>(k));
      case onnx::TensorProto::INT32: return t.int32_data(static_cast<int>(k));
      case onnx::TensorProto::DOUBLE: return t.double_data(static_cast<int>(k));
      default: return 0;
    }
  };
  if (t.data_type() == onnx::TensorProto::INT64) {
    for (int64_t k = 0; k < n; ++k) {
      if (raw) std::memcpy(&c.i[k], raw->data() + k * 8, 8);
      else c.i[k] = t.int64_data(static_cast<int>(k));
    }
  } else if (t.data_type() == onnx::TensorProto::FLOAT && raw) {
    std::memcpy(c.f.f32(), raw->data(), want);
  } else {
    for (int64_t k = 0; k < n; ++k) {
      if (integer) c.i[k] = static_cast<int64_t>(get(k));
      else c.f.f32()[k] = static_cast<float>(get(k));
    }
  }
  return c;
}

}  // namespace bks::onnx_import
