// Shape inference and verification as a pass over the graph: every node's arity and
// attributes checked against its definition, every value's shape inferred, in graph
// order. Needs only op definitions: no kernel is built, no memory is planned. Deploy, the
// dashboard and the executor all use it.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op_def.h"

namespace bks {

// The definition of node n, with its arity and attributes checked (InputError naming the
// node's file and line otherwise).
const OpDef& checked_def(const Graph& g, int n, Phase phase);
// Shapes of node n's inputs, as inferred so far.
std::vector<Shape> input_shapes(const Graph& g, int n);
// And of its outputs.
std::vector<Shape> output_shapes(const Graph& g, int n);
// Infers node n's output shapes from its inputs' (which must be inferred already).
void infer_node_shapes(Graph& g, int n, Phase phase);
// checked_def and infer_node_shapes for every node.
void infer_shapes(Graph& g, Phase phase);

}  // namespace bks
