#include "graph/graph.h"

#include <fmt/format.h>

namespace bks {

std::string FusedPostOps::describe() const {
  std::string s = residual_sum ? " +sum" : "";
  if (bounded())
    s += fmt::format(" +clip(0,{})", relu_max);
  else if (relu)
    s += " +relu";
  return s;
}

int Graph::add_value(const std::string& name) {
  values.push_back(Value{name, {}, -1, {}});
  return static_cast<int>(values.size()) - 1;
}

std::vector<int> Graph::outputs() const {
  std::vector<int> out;
  for (int v = 0; v < static_cast<int>(values.size()); ++v)
    if (values[v].consumers.empty() && values[v].producer >= 0) out.push_back(v);
  return out;
}

int Graph::find_value(const std::string& name) const {
  for (int v = static_cast<int>(values.size()) - 1; v >= 0; --v)
    if (values[v].name == name) return v;
  return -1;
}

const Node* Graph::find_node(const std::string& name) const {
  for (auto& n : nodes)
    if (n.name == name) return &n;
  return nullptr;
}

std::string Graph::describe(int node) const {
  const Node& n = nodes.at(node);
  return fmt::format("{}: layer '{}' ({})", n.where.empty() ? source : n.where, n.name, n.type);
}

}  // namespace bks
