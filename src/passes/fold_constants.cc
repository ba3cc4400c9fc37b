// Pass: fold constant arithmetic into the weights next to it. A Power layer with power 1
// computes y = scale * x + shift, a fixed affine map (an input normalisation, typically):
//  - the identity (scale 1, shift 0) goes;
//  - read only by Convolutions / InnerProducts, it folds into their weights (w * scale)
//    and biases (+ shift * sum of w), the shift only where no padding would see it;
//  - after a Convolution / InnerProduct, fold_batchnorm folds it like a Scale.
// Caffe graphs have no constant-only subgraphs to evaluate ahead (there is no constant
// layer), so fixed-coefficient layers are the constants there are to fold.
#include <fmt/format.h>

#include <algorithm>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

// A fixed affine map y = scale * x + shift, the same on every element (affine Power).
bool scalar_affine(const Graph& g, int n, float& scale, float& shift) {
  const Node& node = g.nodes[n];
  OpTraits t = op_traits(node);
  if (!t.elementwise || !t.per_channel_affine || !node.params.empty()) return false;
  std::vector<double> a, b;
  if (!op_def(g, n).channel_affine(node, {}, 1, a, b)) return false;
  scale = static_cast<float>(a[0]);
  shift = static_cast<float>(b[0]);
  return true;
}

// Whether reader r can take y = scale * x + shift (its first and only use of y) into its
// weights: exact for any scale, and for a shift where no zero padding enters the window.
bool can_absorb(DeployModel& m, int r, int y, float shift) {
  const Node& n = m.graph.nodes[r];
  if (n.inputs.empty() || n.inputs[0] != y || std::count(n.inputs.begin(), n.inputs.end(), y) != 1) return false;
  if (!op_traits(n).weighted_linear || n.deploy.fusion.any()) return false;
  return !weights_shared(m, r) && (shift == 0.f || !op_def(m.graph, r).pads_input(n));
}

// reader(scale * x + shift) = reader'(x): w' = w * scale, b' = b + shift * (sum of w over
// each output's inputs).
void absorb(DeployModel& m, int r, float scale, float shift) {
  Node& n = m.graph.nodes[r];
  const OpDef& def = op_def(m.graph, r);
  const bool transposed = def.weights_output_last(n);                                    // weights [k, n]
  for (const ParamRef& ref : n.params) m.weights[ref.key] = m.weights[ref.key].clone();  // private copies
  Tensor& w = m.blob(r, 0);
  const int64_t outputs = def.output_channels(n);
  const int64_t per = w.numel() / outputs;
  std::vector<double> sum(outputs, 0.0);
  for (int64_t i = 0; i < w.numel(); ++i) {
    int64_t o = transposed ? i % outputs : i / per;
    sum[o] += w.f32()[i];
    w.f32()[i] *= scale;
  }
  if (shift == 0.f) return;
  ensure_bias(m, r, outputs);
  Tensor& b = m.blob(r, 1);
  for (int64_t o = 0; o < outputs; ++o) b.f32()[o] = static_cast<float>(b.f32()[o] + shift * sum[o]);
}

}  // namespace

PassReport fold_constants(DeployModel& m) {
  PassReport rep{"fold-constants", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const Node& node = g.nodes[n];
    float scale = 1.f, shift = 0.f;
    if (!scalar_affine(g, n, scale, shift) || node.inputs.size() != 1 || node.outputs.size() != 1) continue;
    const int x = node.inputs[0], y = node.outputs[0];
    const auto& readers = g.values[y].consumers;
    if (readers.empty()) continue;  // a net output keeps its layer
    const bool identity = scale == 1.f && shift == 0.f;
    if (!identity) {
      bool all = true;
      for (int r : readers) all = all && can_absorb(m, r, y, shift);
      if (!all) continue;
      for (int r : readers) {
        absorb(m, r, scale, shift);
        rep.changes.push_back(fmt::format("folded {} '{}' (x * {} + {}) into {} '{}'", node.type, node.name, scale,
                                          shift, g.nodes[r].type, g.nodes[r].name));
      }
    } else {
      rep.changes.push_back(fmt::format("removed {} '{}' (the identity)", node.type, node.name));
    }
    replace_uses(g, y, x);
    g.nodes[n].inputs.clear();
    g.nodes[n].outputs.clear();
    dead[n] = true;
    relink(g);
  }
  erase_nodes(g, dead);
  return rep;
}

}  // namespace bks
