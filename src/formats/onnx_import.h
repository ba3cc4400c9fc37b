// ONNX models (opset 11-18, as PyTorch and torchvision export CNNs) as Caffe layers: each
// ONNX node becomes the layer(s) bakusoku already runs, so an imported model goes through
// the same graph, passes and runtime as a prototxt. Initializers become the layers' blobs.
#pragma once

#include <string>

#include "core/tensor.h"
#include "formats/caffe_net.h"

namespace bks {

// Whether `path` names an ONNX model (by its extension, .onnx).
bool is_onnx_file(const std::string& path);

// Reads an ONNX model: the returned net's layers are Caffe layers and its `weights` hold
// each layer's blobs. A graph input's dynamic batch dimension becomes 1; `input_shape`
// (when not empty) replaces the shape of the model's only input. InputError (one line
// naming the file) on anything the importer cannot translate faithfully.
NetLoad import_onnx(const std::string& path, const Shape& input_shape = {});

}  // namespace bks
