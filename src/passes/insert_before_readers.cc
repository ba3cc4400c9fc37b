#include "passes/insert_before_readers.h"

#include <map>

#include "graph/graph_edit.h"

namespace bks {

void insert_before_readers(Graph& g, const std::vector<bool>& chosen, const std::string& type,
                           const std::string& suffix,
                           const std::function<void(const Node& reader, const std::string& value, bool made)>& seen) {
  std::vector<Node> nodes;
  std::map<int, int> replaced;  // value -> the new node's output, for the chosen readers
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (chosen[k] && !n.inputs.empty()) {
      const int v = n.inputs[0];
      auto it = replaced.find(v);
      const bool made = it == replaced.end();
      if (made) {
        const std::string name = g.values[v].name + suffix;
        Node q;
        q.name = name;
        q.type = type;
        q.where = n.where;
        q.attrs = default_attrs(type);
        q.inputs = {v};
        q.propagate_down = {true};
        q.outputs = {g.add_value(name)};
        g.values[q.outputs[0]].shape = g.values[v].shape;
        nodes.push_back(std::move(q));
        it = replaced.emplace(v, nodes.back().outputs[0]).first;
      }
      n.inputs[0] = it->second;
      if (seen) seen(n, g.values[v].name, made);
    }
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  relink(g);
}

}  // namespace bks
