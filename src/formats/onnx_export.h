// Inference graphs out as ONNX models (opset 13, weights inline as initializers), so a net
// trained here runs in ONNX Runtime, TensorRT or anything else that reads ONNX. Each node
// type has its own writer (formats/onnx_export_*.cc, registered with BKS_ONNX_EXPORT).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace bks {

struct OnnxExportOptions {
  // The inputs' first dimension becomes the symbol "N" (and so does every output dimension
  // that follows it), instead of the batch the graph declares.
  bool dynamic_batch = false;
  std::string producer = "bakusoku";
};

struct OnnxExportResult {
  int opset = 0;
  int nodes = 0;  // ONNX nodes written
  std::vector<std::string> inputs, outputs;
};

// Writes `g` (an inference graph with shapes inferred; node.params[i].key names each blob
// in `weights`) to `path`, atomically. InputError naming the layer for a node type or an
// attribute ONNX cannot express here.
OnnxExportResult export_onnx(const Graph& g, const std::map<std::string, Tensor>& weights, const std::string& path,
                             const OnnxExportOptions& o = {});

}  // namespace bks
