// The rewrite both quantization-aware passes make (insert_fake_quant.h, insert_binarize.h):
// a new node between a value and some of the nodes that read it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace bks {

// Puts a node of `type` (its default attributes, one input, one output; node and output named
// "<value><suffix>") between each value and the nodes n with chosen[n] that read it as their
// input 0: one node per value, however many chosen readers it has. Other readers keep reading
// the value; its shape, where the graph has shapes, carries over. `seen` is told of each chosen
// reader, the value it read, and whether the node before it was made for it (true for the
// value's first chosen reader). Relinks; the caller verifies.
void insert_before_readers(Graph& g, const std::vector<bool>& chosen, const std::string& type,
                           const std::string& suffix,
                           const std::function<void(const Node& reader, const std::string& value, bool made)>& seen);

}  // namespace bks
