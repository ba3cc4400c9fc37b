// Loading and saving a model's parameter blobs: safetensors (bakusoku's format, tensors
// named "<layer>.<index>") and Caffe's binary .caffemodel for reading.
#pragma once

#include <map>
#include <string>

#include "graph/param_store.h"

namespace bks {

// `metadata` joins the file's own ("format"): train --qat binary / pow2 records its
// "weight_grid" there, for deploy.
void save_weights(const std::string& path, const ParamStore& store,
                  const std::map<std::string, std::string>& metadata = {});
// Copies every blob found in the file into the store. Blobs the file lacks keep their
// initial values (as in a fine-tune whose last layer was renamed; one warning names them),
// but a file with none of them is an InputError (another net's weights), and so is a blob
// of the wrong shape, naming both, unless `reinit_mismatched`: then such a blob keeps its
// initial values too (a classifier resized for another class count), with a warning naming
// both shapes. A V1 or V0 .caffemodel is upgraded first, as Caffe does (caffe_upgrade.h).
// Returns how many blobs were loaded.
int load_weights(const std::string& path, ParamStore& store, bool reinit_mismatched = false);
// The blobs a model file carries (NetLoad::weights) into the store; every blob of the store
// must be there, of its shape (InputError naming `source`). Returns how many were copied.
int load_weights(const std::map<std::string, Tensor>& blobs, ParamStore& store, const std::string& source);

}  // namespace bks
