// Loading and saving a model's parameter blobs: safetensors (bakusoku's format, tensors
// named "<layer>.<index>") and Caffe's binary .caffemodel for reading.
#pragma once

#include <string>

#include "graph/param_store.h"

namespace bks {

void save_weights(const std::string& path, const ParamStore& store);
// Copies every blob found in the file into the store. Blobs the file lacks keep their
// initial values (with a warning); a blob of the wrong shape is an InputError naming both.
// Returns how many blobs were loaded.
int load_weights(const std::string& path, ParamStore& store);

}  // namespace bks
