// The graph IR every front end produces and every executor and pass consumes.
//
// Values are in SSA form: each is produced by exactly one node (or is a graph input). Caffe's
// in-place layers (bottom == top) become a new value with the same blob name; the runtime
// decides whether the two share a buffer. A value read by several nodes has its gradients
// summed by the executor, which is what Caffe's automatically inserted Split layers did.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "core/tensor.h"
#include "graph/attrs.h"
#include "graph/precision.h"

namespace bks {

using proto::Phase;

struct Value {
  std::string name;   // blob name as written in the prototxt
  Shape shape;        // filled by shape inference
  int producer = -1;  // node index, -1 for none
  std::vector<int> consumers;
};

// How a node's parameter blob i learns, as given (Caffe's ParamSpec): nodes naming the same
// share_name share one blob.
struct ParamSpec {
  std::string share_name;
  float lr_mult = 1.f;
  float decay_mult = 1.f;
  // Whether the file gave them: layers sharing a blob must agree on the multipliers they
  // give, and the first one given holds for the blob (Caffe's rule).
  bool has_lr_mult = false, has_decay_mult = false;
};

// One learnable blob of a node, bound to the parameter store.
struct ParamRef {
  std::string key;         // name in the parameter store and in weight files: "<layer>.<index>"
  std::string share_name;  // ParamSpec.name: nodes naming the same share one blob
  float lr_mult = 1.f;
  float decay_mult = 1.f;
};

// Operations deploy folded into a node as oneDNN post-ops (inference graphs only).
struct FusedPostOps {
  bool residual_sum = false;  // adds the node's second input (an Eltwise SUM folded in)
  bool relu = false;          // then a ReLU with this negative slope
  float relu_slope = 0.f;
  // and this upper bound (ReLU6, Clip from 0); fused into convolutions only.
  float relu_max = std::numeric_limits<float>::infinity();
  bool bounded() const { return relu && relu_max < std::numeric_limits<float>::infinity(); }
  // " +sum", " +relu", " +clip(0,6)": what `time` and --print-graph show.
  std::string describe() const;
  bool any() const { return residual_sum || relu; }
};

// What deploy decided for a node: fields of the IR (Caffe has no words for them), saved in
// bundles, never read from a prototxt.
struct NodeDeploy {
  // The arithmetic the node computes in (values between nodes stay f32, or int8 / bf16 where
  // such a node writes for readers of that type): kernels are chosen for it.
  Precision precision = Precision::fp32;
  FusedPostOps fusion;
  std::string kernel;  // the algorithm autotuning chose ("direct", "winograd"); "" to choose at load
  // INT8 inference: the calibrated |x| range of the input, quantized to s8 with scale
  // 127 / threshold (0: the node computes in f32) ...
  float int8_input_threshold = 0.f;
  // ... and of the output when the node writes int8 for int8 readers (u8, 255 / threshold
  // after a fused ReLU; s8, 127 / threshold otherwise; 0: writes f32).
  float int8_output_threshold = 0.f;
  // ... and of a fused residual (input 1) that arrives int8 (its writer's output threshold;
  // 0: it arrives f32).
  float int8_residual_threshold = 0.f;
  // BF16 inference: the node writes bf16 for bf16 readers (values between them stay bf16).
  bool bf16_output = false;
  bool empty() const {
    return precision == Precision::fp32 && !fusion.any() && kernel.empty() && int8_input_threshold == 0.f &&
           int8_output_threshold == 0.f && int8_residual_threshold == 0.f && !bf16_output;
  }
};

struct Node {
  std::string name;
  std::string type;
  std::string where;  // "file:line" of the layer's definition, for error messages
  Attrs attrs;        // the op's typed attributes (graph/attrs.h); empty for ops without any
  std::vector<int> inputs;
  std::vector<int> outputs;
  // One per output when given (empty: the op's default for output 0, 0 for the others).
  std::vector<float> loss_weight;
  std::vector<bool> propagate_down;    // one per input
  std::vector<ParamSpec> param_specs;  // per parameter blob, as given (may be fewer)
  std::vector<ParamRef> params;        // filled when the op declares its blobs
  NodeDeploy deploy;
};

struct Graph {
  std::string name;
  std::string source;  // the file it came from
  std::vector<Value> values;
  std::vector<Node> nodes;

  int add_value(const std::string& name);
  // Values nobody consumes: Caffe's "net outputs" (loss, accuracy, ...).
  std::vector<int> outputs() const;
  // Latest value carrying this blob name, or -1.
  int find_value(const std::string& name) const;
  const Node* find_node(const std::string& name) const;
  // Error prefix for a node: "file:line: layer 'name' (Type)".
  std::string describe(int node) const;
};

}  // namespace bks
