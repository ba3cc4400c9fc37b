// The deployment bundle (.bks): one safetensors file holding the optimised inference graph
// (the IR as JSON, formats/graph_json.h, in the metadata), its blobs ("<layer>.<index>",
// as weights files name them) and what deploy decided (precision, passes, source). A
// bundle of another format version, a truncated or corrupt file, or a graph that does not
// parse is an InputError naming the file (and the version).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace bks {

// 1: the graph as Caffe prototxt text with bakusoku's proto extensions (no longer read).
// 2: the graph IR as JSON.
// 3: weights may be stored coded (formats/weight_coding.h), named with their shapes in the
//    "coded_weights" metadata (still read).
// 4: a bundle with coded weights holds its metadata and coded weights packed in one U8
//    tensor (formats/packed_parts.h), the metadata deflated; its safetensors header names
//    only the format. A bundle without coded weights is still written as 2.
// 5: layout 2 or 4 (4 when it holds the packed tensor), and the header names what the graph
//    needs a reader to implement beyond format 4's ("bakusoku_requires", comma-separated,
//    see bundle_requirements), so a reader that lacks one refuses the bundle instead of
//    running it wrong. Only a bundle that needs something is written as 5, so readers of
//    format 4 still read the others.
constexpr int kBundleVersion = 5;

struct Bundle {
  Graph graph;
  std::map<std::string, Tensor> weights;
  std::map<std::string, std::string> info;  // "precision", "source", "passes", ...
  // The weights stored coded (deploy --compress): their coded bytes as U8 tensors, by name.
  // `weights` holds their decoded values all the same; change a weight and drop its entry.
  std::map<std::string, Tensor> coded;
};

// Sets the batch (first) dimension of every external input's shapes.
void set_input_batch(Graph& g, int64_t batch);

// What running `g` needs beyond format 4 (sorted, no repeats): "int8_average_pooling" when
// an average pooling reads int8 (a format-4 reader would read its levels as floats).
std::vector<std::string> bundle_requirements(const Graph& g);

void save_bundle(const std::string& path, const Bundle& b);
Bundle load_bundle(const std::string& path);
// Whether the file starts like a bundle (so `test` and `bench` can tell it from a prototxt).
bool is_bundle_file(const std::string& path);

}  // namespace bks
