// Editing a Graph in place (for passes) and checking it is still well formed.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace bks {

// Recomputes every value's producer and consumers from the nodes' input/output lists.
void relink(Graph& g);
// Every node reading `from` reads `to` instead (then relink).
void replace_uses(Graph& g, int from, int to);
// Removes the nodes with dead[n] set and every value no remaining node reads or writes;
// renumbers nodes and values, keeping their order.
void erase_nodes(Graph& g, const std::vector<bool>& dead);
// Throws RuntimeError, naming `stage`, unless: indices are in range, every value has at
// most one producer, and every node reads only values produced by earlier nodes.
void verify_graph(const Graph& g, const std::string& stage);

}  // namespace bks
