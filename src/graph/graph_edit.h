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
// Appends src's nodes, except those with skip[n], to dst. A value src reads but does not
// produce itself (a graph input, or an output of a skipped node) is dst's latest value of
// the same name; InputError (naming `what`) when dst has none.
void append_graph(Graph& dst, const Graph& src, const std::vector<bool>& skip, const std::string& what);
// For every value: whether a deployed net may hand its buffer to a reader in another type
// (bf16, int8): it is read by a node (not only a net output), and no other value has its
// name (Caffe's in-place layers rewrite one blob, whose buffer the planner may share).
std::vector<bool> own_buffer_values(const Graph& g);
// Throws RuntimeError, naming `stage`, unless: indices are in range, every value has at
// most one producer, and every node reads only values produced by earlier nodes.
void verify_graph(const Graph& g, const std::string& stage);

}  // namespace bks
