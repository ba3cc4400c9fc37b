// Binding a graph's parameter blobs to a ParamStore: each node's declared blobs are found
// (by key "<layer>.<index>", or shared through ParamSpec.name) or created and filled with
// their filler from a stream derived from the seed and the key. Shared by the executor and
// by everything that needs a graph's weights without running it (deploy).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/param_store.h"
#include "ops/op_def.h"

namespace bks {

// The blobs node n declares (its definition's params() for the graph's shapes).
using ParamDecls = std::function<std::vector<ParamDecl>(int node)>;
ParamDecls declared_params(const Graph& g, Phase phase);

// Where resolve_parameters() finds and adds blobs: a ParamStore (bind_parameters below), or
// a table of shapes for callers that check a net without allocating it (the server).
class ParamSink {
 public:
  virtual ~ParamSink() = default;
  // The blob shared under `share_name`, or the blob named `key`; -1 if none.
  virtual int find_shared(const std::string& share_name) const = 0;
  virtual int find_key(const std::string& key) const = 0;
  virtual const Shape& shape(int blob) const = 0;
  virtual const std::string& key(int blob) const = 0;
  // A new blob for node n's declaration `decl` (ref: its key, sharing and multipliers).
  virtual int add(int node, const ParamRef& ref, const ParamDecl& decl) = 0;
  // A layer sharing `blob` gives multipliers its owner left unset: they hold for the blob.
  virtual void set_multipliers(int blob, float lr_mult, float decay_mult) {}
};

// Fills every node's `params` (keys "<layer>.<index>", sharing, lr/decay multipliers) and
// returns, per node, the sink's index of each of its blobs, adding those not found.
// InputError naming the layer when it gives more ParamSpecs than it has blobs, a shared or
// existing blob's shape differs, or layers sharing a blob give it different multipliers.
std::vector<std::vector<int>> resolve_parameters(Graph& g, const ParamDecls& decls, ParamSink& sink);

// resolve_parameters() into a ParamStore: returns, per node, the store index of each of its
// blobs. New blobs are filled unless `fill` is false (then
// they stay zero: for callers that load weights next). InputError naming the layer when
// it gives more ParamSpecs than it has blobs, or a shared blob's shape differs.
std::vector<std::vector<int>> bind_parameters(Graph& g, ParamStore& store, uint64_t seed, const ParamDecls& decls,
                                              bool fill = true);

}  // namespace bks
