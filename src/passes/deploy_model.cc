#include "passes/deploy_model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "graph/graph_edit.h"
#include "ops/op_def.h"

namespace bks {

int DeployModel::sole_consumer(int node) const {
  const Node& n = graph.nodes.at(node);
  if (n.outputs.empty()) return -1;
  const auto& c = graph.values[n.outputs[0]].consumers;
  return c.size() == 1 ? c[0] : -1;
}

void absorb_into(Graph& g, int producer, int n, std::vector<bool>& dead) {
  g.nodes[producer].outputs[0] = g.nodes[n].outputs[0];
  g.nodes[n].inputs.clear();
  g.nodes[n].outputs.clear();
  dead[n] = true;
  relink(g);
}

bool weights_shared(const DeployModel& m, int node) {
  const Node& n = m.graph.nodes.at(node);
  if (n.params.empty()) return false;
  for (int q = 0; q < static_cast<int>(m.graph.nodes.size()); ++q)
    if (q != node)
      for (const ParamRef& ref : m.graph.nodes[q].params)
        if (ref.key == n.params[0].key) return true;
  return false;
}

void ensure_bias(DeployModel& m, int node, int64_t channels) {
  Node& n = m.graph.nodes.at(node);
  const OpDef& def = op_def(m.graph, node);
  if (def.has_bias(n)) return;
  def.set_bias_term(n);
  ParamRef ref;
  ref.key = fmt::format("{}.1", n.name);
  n.params.push_back(ref);
  Tensor zero({channels});  // zero-filled
  m.weights[ref.key] = zero;
}

std::vector<PassReport> run_deploy_passes(
    DeployModel& m, const std::function<void(const PassReport&, const DeployModel&)>& after_each) {
  std::vector<PassReport> reports;
  for (auto pass : {strip_training, fold_batchnorm, fold_constants, trim_padded_taps, fuse_residual, fuse_relu}) {
    reports.push_back(pass(m));
    verify_graph(m.graph, reports.back().pass);
    if (after_each) after_each(reports.back(), m);
  }
  return reports;
}

Graph bundle_graph(const DeployModel& m) {
  Graph g = m.graph;
  for (Node& node : g.nodes) {
    // Blobs travel by layer name, unshared; the rest is training's.
    node.params.clear();
    node.param_specs.clear();
    node.loss_weight.clear();
    node.propagate_down.assign(node.inputs.size(), true);
  }
  return g;
}

std::map<std::string, Tensor> weights_by_layer(const DeployModel& m) {
  std::map<std::string, Tensor> out;
  for (const Node& node : m.graph.nodes)
    for (size_t i = 0; i < node.params.size(); ++i)
      out[fmt::format("{}.{}", node.name, i)] = m.weights.at(node.params[i].key);
  return out;
}

std::string describe_graph(const DeployModel& m) {
  std::string s;
  for (const Node& node : m.graph.nodes) {
    std::string in, out;
    for (int v : node.inputs) in += (in.empty() ? "" : ", ") + m.graph.values[v].name;
    for (int v : node.outputs)
      out += (out.empty() ? "" : ", ") + m.graph.values[v].name + " " + shape_str(m.graph.values[v].shape);
    std::string fused;
    fused += node.deploy.fusion.describe();
    if (node.deploy.precision != Precision::fp32) fused += fmt::format(" [{}]", precision_name(node.deploy.precision));
    s += fmt::format("  {:<18} {:<20} {} -> {}{}\n", node.type, node.name, in.empty() ? "()" : in, out, fused);
  }
  return s;
}

}  // namespace bks
