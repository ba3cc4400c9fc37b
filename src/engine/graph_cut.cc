#include "engine/graph_cut.h"

#include "graph/graph_edit.h"
#include "ops/op_def.h"

namespace bks {

int value_handed_after(const Graph& g, int k) {
  const int nodes = static_cast<int>(g.nodes.size());
  if (k < 0 || k + 1 >= nodes) return -1;
  for (int n = k + 1; n < nodes; ++n)
    if (op_traits(g.nodes[n]).external_input) return -1;
  int handed = -1;
  for (int v = 0; v < static_cast<int>(g.values.size()); ++v) {
    const Value& x = g.values[v];
    bool read_after = false;
    for (int c : x.consumers) read_after = read_after || c > k;
    if (x.producer > k || (x.producer < 0 && !read_after)) continue;
    if (x.producer >= 0 && x.consumers.empty()) return -1;  // a net output before the cut
    if (!read_after) continue;
    if (x.producer < 0 || handed >= 0) return -1;
    handed = v;
  }
  return handed;
}

std::optional<GraphCut> cut_graph_after(const Graph& g, int k) {
  const int handed = value_handed_after(g, k);
  if (handed < 0) return std::nullopt;
  const int nodes = static_cast<int>(g.nodes.size());

  GraphCut cut;
  cut.head = g;
  std::vector<bool> after(g.nodes.size(), false);
  for (int n = k + 1; n < nodes; ++n) after[n] = true;
  erase_nodes(cut.head, after);

  // The tail: its own Input for the handed value, then the nodes after k, reading values by
  // index (names repeat along Caffe's in-place chains).
  Graph& t = cut.tail;
  t.name = g.name;
  t.source = g.source;
  std::vector<int> map(g.values.size(), -1);
  Node in;
  in.name = g.values[handed].name + "/handed_over";
  in.where = g.nodes[g.values[handed].producer].where;
  map[handed] = t.add_value(g.values[handed].name);
  t.values[map[handed]].shape = g.values[handed].shape;
  in.outputs = {map[handed]};
  make_external_input(in, {g.values[handed].shape});
  t.nodes.push_back(std::move(in));
  for (int n = k + 1; n < nodes; ++n) {
    Node node = g.nodes[n];
    for (int& v : node.inputs) v = map[v];  // written before: by the tail or handed over
    for (int& v : node.outputs) {
      const int d = t.add_value(g.values[v].name);
      t.values[d].shape = g.values[v].shape;
      map[v] = d;
      v = d;
    }
    t.nodes.push_back(std::move(node));
  }
  relink(t);
  verify_graph(t, "the graph's tail after a cut");
  return cut;
}

}  // namespace bks
