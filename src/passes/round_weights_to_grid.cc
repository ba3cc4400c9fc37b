// Weights trained with train --qat binary or pow2 saw their grid in every forward pass; the
// snapshot keeps the floats the solver updated, so deploy rounds them the same way before
// BatchNorm folds into them.
#include <fmt/format.h>

#include <set>

#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {

PassReport round_weights_to_grid(DeployModel& m, WeightGrid grid, const std::string& name,
                                 const std::set<std::string>& keep_float) {
  PassReport r{"weight-grid", {}};
  std::set<std::string> done;
  for (size_t n = 0; n < m.graph.nodes.size(); ++n) {
    const Node& node = m.graph.nodes[n];
    if (!op_traits(node).weighted_linear || node.params.empty() || !done.insert(node.params[0].key).second) continue;
    if (keep_float.count(node.params[0].key)) {
      r.changes.push_back(fmt::format("{} '{}': weights kept float, as training kept them", node.type, node.name));
      continue;
    }
    Tensor& w = m.blob(static_cast<int>(n), 0);
    w = w.clone();  // the caller's tensors stay as loaded
    round_to_grid(w, op_def(m.graph, static_cast<int>(n)).weights_output_last(node), grid, 0.f);
    r.changes.push_back(fmt::format("{} '{}': weights on the {} grid", node.type, node.name, name));
  }
  return r;
}

}  // namespace bks
