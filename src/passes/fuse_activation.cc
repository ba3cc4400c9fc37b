// Passes: fold a residual Eltwise SUM and a ReLU into the Convolution / InnerProduct
// before them, as oneDNN post-ops (the node's deploy.fusion).
#include <fmt/format.h>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

// The producer of node n's first input, when that producer is a layer type `types`
// accepts and n is the only reader of its output.
int fusable_producer(const DeployModel& m, int n, int input, bool conv_only) {
  const Graph& g = m.graph;
  int p = g.values[g.nodes[n].inputs[input]].producer;
  if (p < 0 || m.sole_consumer(p) != n) return -1;
  const OpTraits t = op_traits(g.nodes[p]);
  if (!t.weighted_linear || (conv_only && !t.convolution)) return -1;
  return p;
}

}  // namespace

PassReport fuse_residual(DeployModel& m) {
  PassReport r{"fuse-residual", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    if (!op_traits(node).residual_sum) continue;
    // Prefer the branch computed last: the other one is then ready when it runs.
    for (int side : {1, 0}) {
      int p = fusable_producer(m, n, side, true);
      if (p < 0 || g.nodes[p].deploy.fusion.any()) continue;
      int other = node.inputs[1 - side];
      if (g.values[other].producer >= p) continue;  // not computed before the convolution
      if (g.values[other].shape != g.values[node.outputs[0]].shape) continue;
      g.nodes[p].inputs.push_back(other);
      g.nodes[p].deploy.fusion.residual_sum = true;
      r.changes.push_back(fmt::format("{} SUM '{}' into {} '{}' (+ '{}')", node.type, node.name, g.nodes[p].type,
                                      g.nodes[p].name, g.values[other].name));
      absorb_into(g, p, n, dead);
      break;
    }
  }
  erase_nodes(g, dead);
  return r;
}

PassReport fuse_relu(DeployModel& m) {
  PassReport r{"fuse-relu", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    if (!op_traits(node).fusable_activation) continue;
    const float top = op_def(g, n).activation_max(node);
    const bool bounded = top < std::numeric_limits<float>::infinity();
    int p = fusable_producer(m, n, 0, bounded);  // matrix products take unbounded ReLUs only
    if (p < 0 || g.nodes[p].deploy.fusion.relu) continue;
    FusedPostOps& f = g.nodes[p].deploy.fusion;
    f.relu = true;
    f.relu_slope = op_def(g, n).activation_slope(node);
    f.relu_max = top;
    r.changes.push_back(fmt::format("{} '{}' into {} '{}'", node.type, node.name, g.nodes[p].type, g.nodes[p].name));
    absorb_into(g, p, n, dead);
  }
  erase_nodes(g, dead);
  return r;
}

}  // namespace bks
