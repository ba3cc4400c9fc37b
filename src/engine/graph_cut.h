// A graph cut in two after one node, so the nodes before it can run a batch in parts (each
// layer's output still in cache for the next) and the rest on the whole batch at once
// (layers whose weights outweigh their activations, a classifier, read them once a batch).
#pragma once

#include <optional>

#include "graph/graph.h"

namespace bks {

struct GraphCut {
  Graph head;  // nodes 0..k; its one output is the value handed over
  Graph tail;  // an Input giving that value (of g's shape for it, which the caller may set), then nodes k+1..
};

// The value a cut after node k hands over, or -1 where the graph cannot be cut there:
// exactly one value written by nodes 0..k must be read after k, none of them may be left
// unread (a net output before the cut), and no node after k may take an external input.
int value_handed_after(const Graph& g, int k);
// The cut after node k; nullopt where value_handed_after finds none.
std::optional<GraphCut> cut_graph_after(const Graph& g, int k);

}  // namespace bks
