#include "train/weight_blobs.h"

#include <algorithm>

#include "ops/op_def.h"

namespace bks {

std::vector<WeightBlob> weight_blobs(const Net& net) {
  const Graph& g = net.graph();
  std::vector<WeightBlob> out;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const Node& node = g.nodes[n];
    if (!op_traits(node).weighted_linear || node.params.empty()) continue;
    const int p = net.param_index(n, 0);
    if (std::any_of(out.begin(), out.end(), [&](const WeightBlob& w) { return w.param == p; })) continue;
    out.push_back({p, op_def(g, n).weights_output_last(node)});
  }
  return out;
}

}  // namespace bks
