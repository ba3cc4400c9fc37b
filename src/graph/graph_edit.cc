#include "graph/graph_edit.h"

#include <unordered_map>

#include "core/error.h"

namespace bks {

void relink(Graph& g) {
  for (auto& v : g.values) {
    v.producer = -1;
    v.consumers.clear();
  }
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    for (int v : g.nodes[n].outputs) g.values.at(v).producer = n;
    for (int v : g.nodes[n].inputs) g.values.at(v).consumers.push_back(n);
  }
}

void replace_uses(Graph& g, int from, int to) {
  for (auto& node : g.nodes)
    for (int& v : node.inputs)
      if (v == from) v = to;
  relink(g);
}

void erase_nodes(Graph& g, const std::vector<bool>& dead) {
  std::vector<Node> kept;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!dead[n]) kept.push_back(std::move(g.nodes[n]));
  std::vector<int> used(g.values.size(), 0);
  for (auto& node : kept) {
    for (int v : node.inputs) used[v] = 1;
    for (int v : node.outputs) used[v] = 1;
  }
  std::vector<int> renumber(g.values.size(), -1);
  std::vector<Value> values;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (used[v]) {
      renumber[v] = static_cast<int>(values.size());
      values.push_back(std::move(g.values[v]));
    }
  for (auto& node : kept) {
    for (int& v : node.inputs) v = renumber[v];
    for (int& v : node.outputs) v = renumber[v];
  }
  g.nodes = std::move(kept);
  g.values = std::move(values);
  relink(g);
}

std::vector<bool> own_buffer_values(const Graph& g) {
  std::unordered_map<std::string, int> names;
  for (const Value& v : g.values) ++names[v.name];
  std::vector<bool> own(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) own[v] = !g.values[v].consumers.empty() && names[g.values[v].name] == 1;
  return own;
}

void verify_graph(const Graph& g, const std::string& stage) {
  const int nv = static_cast<int>(g.values.size());
  std::vector<int> producer(nv, -1);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const Node& node = g.nodes[n];
    for (int v : node.inputs) {
      if (v < 0 || v >= nv)
        runtime_error("graph invalid after {}: {} reads value #{} of {}", stage, g.describe(n), v, nv);
      if (producer[v] < 0)
        runtime_error("graph invalid after {}: {} reads '{}' before anything produces it", stage, g.describe(n),
                      g.values[v].name);
    }
    for (int v : node.outputs) {
      if (v < 0 || v >= nv)
        runtime_error("graph invalid after {}: {} writes value #{} of {}", stage, g.describe(n), v, nv);
      if (producer[v] >= 0)
        runtime_error("graph invalid after {}: '{}' is produced by both {} and {}", stage, g.values[v].name,
                      g.describe(producer[v]), g.describe(n));
      producer[v] = n;
    }
  }
  for (int v = 0; v < nv; ++v)
    if (g.values[v].producer != producer[v])
      runtime_error("graph invalid after {}: value '{}' has stale producer links", stage, g.values[v].name);
}

}  // namespace bks

namespace bks {

void append_graph(Graph& dst, const Graph& src, const std::vector<bool>& skip, const std::string& what) {
  std::vector<int> map(src.values.size(), -1);
  auto bind = [&](int v) {
    if (map[v] >= 0) return map[v];
    int d = dst.find_value(src.values[v].name);
    if (d < 0)
      input_error("{}: nothing gives '{}', which layer '{}' reads", what, src.values[v].name,
                  src.nodes[src.values[v].consumers.empty() ? 0 : src.values[v].consumers[0]].name);
    return map[v] = d;
  };
  for (size_t n = 0; n < src.nodes.size(); ++n) {
    if (n < skip.size() && skip[n]) continue;
    Node node = src.nodes[n];
    for (int& v : node.inputs) v = bind(v);
    for (int& v : node.outputs) {
      int d = dst.add_value(src.values[v].name);
      map[v] = d;
      v = d;
    }
    dst.nodes.push_back(std::move(node));
  }
  relink(dst);
}

}  // namespace bks
