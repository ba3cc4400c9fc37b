// Binding a graph's parameter blobs to a ParamStore: each node's declared blobs are found
// (by key "<layer>.<index>", or shared through ParamSpec.name) or created and filled with
// their filler from a stream derived from the seed and the key. Shared by the executor and
// by everything that needs a graph's weights without running it (deploy).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"
#include "graph/param_store.h"
#include "ops/op_def.h"

namespace bks {

// The blobs node n declares (its definition's params() for the graph's shapes).
using ParamDecls = std::function<std::vector<ParamDecl>(int node)>;
ParamDecls declared_params(const Graph& g, Phase phase);

// Fills every node's `params` (keys, sharing, lr/decay multipliers) and returns, per node,
// the store index of each of its blobs. New blobs are filled unless `fill` is false (then
// they stay zero: for callers that load weights next). InputError naming the layer when
// it gives more ParamSpecs than it has blobs, or a shared blob's shape differs.
std::vector<std::vector<int>> bind_parameters(Graph& g, ParamStore& store, uint64_t seed, const ParamDecls& decls,
                                              bool fill = true);

}  // namespace bks
