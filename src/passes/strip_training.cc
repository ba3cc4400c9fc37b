// Pass: remove what only training needs (see deploy_model.h).
#include <fmt/format.h>

#include <algorithm>

#include "graph/graph_edit.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

bool is_data_layer(const std::string& type) { return type == "Data" || type == "HDF5Data"; }

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
    if (t == "Dropout") {
      replace_uses(g, node.outputs[0], node.inputs[0]);
      dead[n] = true;
      r.changes.push_back(fmt::format("removed Dropout '{}'", node.name));
    } else if (t == "Accuracy" || t == "Silence") {
      dead[n] = true;
      r.changes.push_back(fmt::format("removed {} '{}'", t, node.name));
    } else if (t == "SoftmaxWithLoss" || t == "SigmoidCrossEntropyLoss") {
      bool softmax = t == "SoftmaxWithLoss";
      proto::LayerParameter p;
      p.set_name(node.name);
      p.set_type(softmax ? "Softmax" : "Sigmoid");
      if (softmax && node.param.has_softmax_param()) *p.mutable_softmax_param() = node.param.softmax_param();
      node.param = p;
      node.type = p.type();
      node.inputs.resize(1);
      node.loss_weight.assign(node.outputs.size(), 0.f);
      node.propagate_down.clear();
      g.values[node.outputs[0]].shape = g.values[node.inputs[0]].shape;
      rename_if_free(g, node.outputs[0], "prob");
      r.changes.push_back(fmt::format("{} '{}' -> {} (output '{}')", t, node.name, p.type(), g.values[node.outputs[0]].name));
    } else if (t.size() > 4 && t.compare(t.size() - 4, 4, "Loss") == 0) {
      dead[n] = true;
      r.changes.push_back(fmt::format("removed {} '{}'", t, node.name));
    } else if (is_data_layer(t)) {
      proto::LayerParameter p;
      p.set_name(node.name);
      p.set_type("Input");
      for (int v : node.outputs) {
        auto* shape = p.mutable_input_param()->add_shape();
        for (int64_t d : g.values[v].shape) shape->add_dim(d);
      }
      node.param = p;
      node.type = "Input";
      r.changes.push_back(fmt::format("{} '{}' -> Input {}", t, node.name, shape_str(g.values[node.outputs[0]].shape)));
    }
  }
  relink(g);
  erase_nodes(g, dead);
  // Input tops nobody reads any more (labels) go, with their shapes; so do Input layers
  // left with none.
  std::vector<bool> unused(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    if (node.type != "Input") continue;
    const auto& shapes = node.param.input_param();
    proto::InputParameter kept;
    std::vector<int> outs;
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      int v = node.outputs[j];
      if (!g.values[v].consumers.empty()) {
        outs.push_back(v);
        if (shapes.shape_size() > 0)
          *kept.add_shape() = shapes.shape(static_cast<int>(std::min<size_t>(j, shapes.shape_size() - 1)));
      } else {
        r.changes.push_back(fmt::format("dropped unused input '{}'", g.values[v].name));
      }
    }
    node.outputs = outs;
    node.loss_weight.assign(outs.size(), 0.f);
    *node.param.mutable_input_param() = kept;
    unused[n] = outs.empty();
  }
  erase_nodes(g, unused);
  return r;
}

}  // namespace bks
