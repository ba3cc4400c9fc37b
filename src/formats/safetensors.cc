#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace bks {
namespace {

bool dtype_from_name(const std::string& s, DType& t) {
  static const std::pair<const char*, DType> names[] = {{"F32", DType::f32}, {"F64", DType::f64}, {"U8", DType::u8},
                                                        {"I8", DType::s8},   {"I32", DType::s32}, {"BF16", DType::bf16},
                                                        {"F16", DType::f16}};
  for (auto& [n, d] : names)
    if (s == n) {
      t = d;
      return true;
    }
  return false;
}

}  // namespace

const Tensor* TensorFile::find(const std::string& name) const {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", dtype_name(t->dtype())}, {"shape", t->shape()}, {"data_offsets", {offset, offset + t->bytes()}}};
    offset += t->bytes();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h.push_back(' ');
  // Header length, header, then each tensor's bytes straight from the tensor (a snapshot
  // never holds a second copy of the weights in memory).
  std::string head(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  head += h;
  std::vector<std::string_view> pieces{head};
  for (auto& [name, t] : tensors) pieces.emplace_back(static_cast<const char*>(t->raw()), t->bytes());
  write_file_atomic(path, pieces);
}

TensorFile load_safetensors(const std::string& path) {
  std::string bytes = read_file(path, "safetensors file");
  if (bytes.size() < 8) input_error("{}: not a safetensors file (shorter than its 8-byte header length)", path);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (hlen > bytes.size() - 8)
    input_error("{}: corrupt safetensors file: header length {} exceeds the file", path, hlen);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(hlen));
  } catch (const std::exception& e) {
    input_error("{}: corrupt safetensors header: {}", path, e.what());
  }
  if (!header.is_object()) input_error("{}: corrupt safetensors header: not a JSON object", path);
  size_t data_start = 8 + hlen, data_size = bytes.size() - data_start;
  TensorFile tf;
  // Tensors may not share bytes: without this check a crafted header could make each of
  // many tensors claim the whole data section and allocate many times the file.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t claimed = 0;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) input_error("{}: __metadata__ must be an object of strings", path);
      for (auto& [k, m] : v.items()) {
        if (!m.is_string()) input_error("{}: __metadata__ '{}' must be a string", path, k);
        tf.metadata[k] = m.get<std::string>();
      }
      continue;
    }
    DType dt;
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !dtype_from_name(v["dtype"], dt))
      input_error("{}: tensor '{}': missing or unsupported dtype", path, name);
    if (!v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      input_error("{}: tensor '{}': missing shape or data_offsets", path, name);
    Shape shape;
    for (auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) input_error("{}: tensor '{}': bad shape", path, name);
      shape.push_back(d.get<int64_t>());
    }
    std::string problem = shape_problem(shape, dtype_size(dt));
    if (!problem.empty()) input_error("{}: tensor '{}': {}", path, name, problem);
    const auto& offsets = v["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      input_error("{}: tensor '{}': data_offsets must be two non-negative integers", path, name);
    auto b = offsets[0].get<uint64_t>(), e = offsets[1].get<uint64_t>();
    // The byte range is checked against the file before the tensor is allocated.
    const uint64_t want = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dt);
    if (e < b || e > data_size || e - b != want)
      input_error(
          "{}: corrupt safetensors file: tensor '{}' byte range [{}, {}) does not fit shape {} or the file "
          "({} data bytes)",
          path, name, b, e, shape_str(shape), data_size);
    claimed += want;
    if (claimed > data_size)
      input_error("{}: corrupt safetensors file: its tensors claim more than its {} data bytes (at tensor '{}')", path,
                  data_size, name);
    Tensor t(shape, dt);
    std::memcpy(t.raw(), bytes.data() + data_start + b, t.bytes());
    if (e > b) ranges.emplace_back(b, e);
    tf.tensors.emplace_back(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k)
    if (ranges[k].first < ranges[k - 1].second)
      input_error("{}: corrupt safetensors file: two tensors share the bytes from {}", path, ranges[k].first);
  return tf;
}

}  // namespace bks
