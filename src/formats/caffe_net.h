// Caffe NetParameter -> Graph: phase/stage/level filtering, in-place blobs, the deprecated
// net-level inputs. Shapes are inferred later, by the runtime, from each op's schema.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "graph/graph.h"

namespace bks {

struct NetLoad {
  proto::NetParameter param;
  std::vector<int> layer_lines;  // line of each layer in the source file
  std::string source;
  // Blobs the model file carries itself ("<layer>.<index>"): an ONNX model's initializers.
  std::map<std::string, Tensor> weights;
};

// A prototxt (upgraded from Caffe's V0/V1 formats when it is in one, with a warning), or an
// ONNX model (.onnx; formats/onnx_import.h) translated into Caffe layers, its graph input of
// `input_shape` when given.
NetLoad load_net_file(const std::string& path, const Shape& input_shape = {});
// A net's prototxt text (`source` names it in errors), upgraded the same way; data paths
// stay as written.
NetLoad parse_net_text(const std::string& text, const std::string& source);

// One layer as a node (name, type, attributes, loss weights), not yet wired to values.
Node caffe_layer_node(const proto::LayerParameter& layer, const std::string& where);

// The Caffe writer: node `node` of g as a layer (its attributes, bottoms, tops, loss weights
// and param specs), so a graph can be shown or saved as users know it.
proto::LayerParameter caffe_layer(const Graph& g, int node);

// Caffe's Accuracy layer (top-k), without bottoms or tops (scoring a bundle adds them).
proto::LayerParameter caffe_accuracy_layer(const std::string& name, int top_k);

// Builds the graph of the layers that Caffe would instantiate in `state`.
Graph build_caffe_graph(const NetLoad& net, const proto::NetState& state);

// Data sources and mean files given as relative paths that do not exist from the current
// directory are looked up beside the prototxt (Caffe resolves them from the current
// directory only).
void resolve_data_paths(proto::NetParameter& net, const std::string& prototxt_dir);
// A path as given if it exists, else relative to `base_dir` if that exists, else as given.
std::string resolve_path(const std::string& path, const std::string& base_dir);

// Whether a Caffe layer type brings data in (Caffe's data layers, including DummyData, which
// bakusoku does not implement, and SegNet's DenseImageData).
bool caffe_data_layer_type(const std::string& type);
// Whether a Caffe layer type is one of Caffe's LossLayers, which get a top of their own when
// the file gives none (Caffe's AutoTopBlobs).
bool caffe_loss_layer_type(const std::string& type);

// The state a net is built in, as `caffe time/test/train` make it: the file's state with
// `phase`, the stages given added, and the level given (a negative `level`: the file's).
struct StateFlags {
  std::vector<std::string> stages;
  int level = -1;
};
proto::NetState net_state(const NetLoad& net, Phase phase, const StateFlags& flags);

// Caffe's rule: does a layer with these include/exclude rules run in `state`?
bool layer_included(const proto::LayerParameter& layer, const proto::NetState& state);

}  // namespace bks
