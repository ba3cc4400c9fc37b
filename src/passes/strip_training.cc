// Pass: remove what only training needs (see deploy_model.h).
#include <fmt/format.h>

#include <algorithm>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

// Renames value v to `name` unless another value already has that name.
void rename_if_free(Graph& g, int v, const std::string& name) {
  for (const auto& val : g.values)
    if (val.name == name) return;
  g.values[v].name = name;
}

}  // namespace

PassReport strip_training(DeployModel& m) {
  PassReport r{"strip-training", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    const std::string t = node.type;
    const OpTraits tr = op_traits(node);
    if (tr.training_only && node.inputs.size() == 1 && node.outputs.size() == 1 &&
        g.values[node.inputs[0]].shape == g.values[node.outputs[0]].shape) {
      // The identity at inference (Dropout): its readers read its input.
      replace_uses(g, node.outputs[0], node.inputs[0]);
      dead[n] = true;
      r.changes.push_back(fmt::format("removed {} '{}'", t, node.name));
    } else if (tr.training_only) {
      dead[n] = true;
      r.changes.push_back(fmt::format("removed {} '{}'", t, node.name));
    } else if (tr.loss && !tr.inference_form.empty()) {
      op_def(g, static_cast<int>(n)).to_inference_form(node);
      node.inputs.resize(1);
      node.loss_weight.assign(node.outputs.size(), 0.f);
      node.propagate_down.clear();
      g.values[node.outputs[0]].shape = g.values[node.inputs[0]].shape;
      rename_if_free(g, node.outputs[0], "prob");
      r.changes.push_back(
          fmt::format("{} '{}' -> {} (output '{}')", t, node.name, node.type, g.values[node.outputs[0]].name));
    } else if (tr.loss) {
      dead[n] = true;
      r.changes.push_back(fmt::format("removed {} '{}'", t, node.name));
    } else if (tr.data_layer) {
      std::vector<Shape> shapes;
      for (int v : node.outputs) shapes.push_back(g.values[v].shape);
      make_external_input(node, shapes);
      r.changes.push_back(
          fmt::format("{} '{}' -> {} {}", t, node.name, node.type, shape_str(g.values[node.outputs[0]].shape)));
    }
  }
  relink(g);
  erase_nodes(g, dead);
  // Input tops nobody reads any more (labels) go, with their shapes; so do Input layers
  // left with none.
  std::vector<bool> unused(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    if (!op_traits(node).external_input) continue;
    std::vector<bool> keep;
    for (int v : node.outputs) {
      keep.push_back(!g.values[v].consumers.empty());
      if (!keep.back()) r.changes.push_back(fmt::format("dropped unused input '{}'", g.values[v].name));
    }
    keep_external_outputs(node, keep);
    unused[n] = node.outputs.empty();
  }
  erase_nodes(g, unused);
  return r;
}

}  // namespace bks
