// What the deployment passes rewrite: an inference graph and its parameter blobs.
//
// Passes are Graph -> Graph rewrites in place (each in its own file); every one returns
// what it changed, in words, and the graph is verified after each (run_passes).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "ops/weight_grids.h"

namespace bks {

struct DeployModel {
  Graph graph;  // shapes inferred; node.params[i].key names each blob in `weights`
  std::map<std::string, Tensor> weights;

  Tensor& blob(int node, int i) { return weights.at(graph.nodes.at(node).params.at(i).key); }
  // The node's only reader of its first output, or -1 (none, several, or a net output).
  int sole_consumer(int node) const;
};

// Whether another node reads the same weights blob as `node` (then they cannot change for
// this one alone).
bool weights_shared(const DeployModel& m, int node);
// Gives a Convolution / InnerProduct without a bias a zero bias of `channels`.
void ensure_bias(DeployModel& m, int node, int64_t channels);

// Node n (a BatchNorm, Scale, Eltwise or ReLU after `producer`) is merged into producer:
// producer now writes n's output, n is emptied and marked dead (erase it with erase_nodes).
void absorb_into(Graph& g, int producer, int n, std::vector<bool>& dead);

struct PassReport {
  std::string pass;
  std::vector<std::string> changes;  // one line per rewrite
};

// Removes what only training needs: Dropout, Accuracy, Silence; SoftmaxWithLoss becomes
// Softmax (output "prob"), SigmoidCrossEntropyLoss becomes Sigmoid, other losses go; data
// layers become Input layers of the same shape (their labels dropped).
PassReport strip_training(DeployModel& m);
// Folds inference BatchNorm, per-channel Scale and affine Power (power 1) layers into the
// preceding Convolution or InnerProduct's weights and bias.
PassReport fold_batchnorm(DeployModel& m);
// Constant arithmetic: identity Power layers go; an affine Power read only by Convolutions
// / InnerProducts folds into their weights (its shift only where they do not pad).
PassReport fold_constants(DeployModel& m);
// Convolutions whose outer kernel taps read only padding at every output (3x3 pad 1 over a
// 1x1 plane) keep the taps that read input, with the pad that keeps the windows in place.
PassReport trim_padded_taps(DeployModel& m);
// Convolution followed by an Eltwise SUM (coefficients 1) with another branch: the sum
// becomes the convolution's post-op, reading the other branch as a second bottom.
PassReport fuse_residual(DeployModel& m);
// Convolution / InnerProduct followed by a ReLU that is its output's only reader: the ReLU
// becomes a post-op.
PassReport fuse_relu(DeployModel& m);

// Weights trained with train --qat binary / pow2: every Convolution and InnerProduct weight
// but those named in `keep_float` rounded to that grid (`name` says which, in the report),
// as the training net saw them.
PassReport round_weights_to_grid(DeployModel& m, WeightGrid grid, const std::string& name,
                                 const std::set<std::string>& keep_float);

// bf16 inference: every Convolution and InnerProduct computes in bf16 (node.deploy.precision;
// values between nodes stay f32).
PassReport compute_in_bf16(Graph& g);

// All of the above, in order. `after_each` sees the model after every pass (for
// --print-graph); the graph is verified after each.
std::vector<PassReport> run_deploy_passes(
    DeployModel& m, const std::function<void(const PassReport&, const DeployModel&)>& after_each = {});

// The model's graph as a bundle keeps it (no parameter sharing or training fields: its
// blobs are named "<layer>.<index>", as weights_by_layer gives them, and weights files
// name them).
Graph bundle_graph(const DeployModel& m);
std::map<std::string, Tensor> weights_by_layer(const DeployModel& m);
// One line per node: type, name, bottoms -> tops with shapes, fused post-ops.
std::string describe_graph(const DeployModel& m);

}  // namespace bks
