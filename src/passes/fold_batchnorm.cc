// Pass: fold inference BatchNorm, per-channel Scale and affine Power into the preceding
// Convolution or InnerProduct. Both are y = a[c] * x + b[c] per output channel c, so the layer's weights
// for channel c scale by a[c] and its bias becomes a[c] * bias[c] + b[c].
#include <fmt/format.h>

#include <cmath>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

bool foldable_producer(const DeployModel& m, int p) {
  const Node& n = m.graph.nodes[p];
  const OpTraits t = op_traits(n);
  if (!t.weighted_linear || n.deploy.fusion.any()) return false;
  // An inner product's channels are its last axis; folding needs them on axis 1 of a 2-d output.
  return t.convolution || m.graph.values[n.outputs[0]].shape.size() == 2;
}

// The per-channel affine map (a, b) node n computes, from its definition and blobs.
bool channel_affine(DeployModel& m, int n, int64_t channels, std::vector<double>& a, std::vector<double>& b) {
  std::vector<const Tensor*> blobs;
  for (size_t i = 0; i < m.graph.nodes[n].params.size(); ++i) blobs.push_back(&m.blob(n, static_cast<int>(i)));
  return op_def(m.graph, n).channel_affine(m.graph.nodes[n], blobs, channels, a, b);
}

// Applies y = a * layer(x) + b to producer p's weights and bias (adding a bias if needed).
void fold_into(DeployModel& m, int p, const std::vector<double>& a, const std::vector<double>& b) {
  const bool output_last = op_def(m.graph, p).weights_output_last(m.graph.nodes[p]);  // weights [k, n]
  const int64_t channels = static_cast<int64_t>(a.size());
  Tensor& w = m.blob(p, 0);
  const int64_t per = w.numel() / channels;
  for (int64_t i = 0; i < w.numel(); ++i) {
    int64_t c = output_last ? i % channels : i / per;
    w.f32()[i] = static_cast<float>(w.f32()[i] * a[c]);
  }
  ensure_bias(m, p, channels);
  Tensor& bias = m.blob(p, 1);
  for (int64_t c = 0; c < channels; ++c) bias.f32()[c] = static_cast<float>(bias.f32()[c] * a[c] + b[c]);
}

}  // namespace

PassReport fold_batchnorm(DeployModel& m) {
  PassReport r{"fold-batchnorm", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    if (!op_traits(node).per_channel_affine) continue;
    int p = g.values[node.inputs[0]].producer;
    if (p < 0 || dead[p] || !foldable_producer(m, p) || m.sole_consumer(p) != n) continue;
    const Node& prod = g.nodes[p];
    int64_t channels = g.values[prod.outputs[0]].shape.at(1);
    std::vector<double> a, b;
    if (!channel_affine(m, n, channels, a, b)) continue;
    if (weights_shared(m, p)) continue;
    // Private copies: the blobs may alias tensors the caller still uses.
    for (const ParamRef& ref : prod.params) m.weights[ref.key] = m.weights[ref.key].clone();
    fold_into(m, p, a, b);
    r.changes.push_back(
        fmt::format("folded {} '{}' into {} '{}'", node.type, node.name, g.nodes[p].type, g.nodes[p].name));
    absorb_into(g, p, n, dead);
  }
  erase_nodes(g, dead);
  return r;
}

}  // namespace bks
