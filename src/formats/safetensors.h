// safetensors: 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data. Writes are atomic.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace bks {

struct TensorFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  const Tensor* find(const std::string& name) const;
};

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Throws InputError naming the file and what is wrong (truncated, bad header, bad offsets).
TensorFile load_safetensors(const std::string& path);

}  // namespace bks
