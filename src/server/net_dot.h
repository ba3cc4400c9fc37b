// A network as Graphviz DOT text, for `dot` to lay out: layers as boxes (name, type, key
// attributes), blobs as arrows labelled with their shapes, the net's outputs as ovals.
// Layers that write in place (a ReLU after a convolution) join the box of the layer they
// follow, so the arrow leaving a box carries what its last layer made.
#pragma once

#include <string>

#include "graph/graph.h"

namespace bks::server {

// How many ranks (boxes along the longest path) one row holds before the drawing wraps
// to the next row, like lines of text: a long net stays as wide as a page, not a strip.
constexpr int kRanksPerRow = 4;

// DOT text for `g` (its shapes inferred). Every name and label from the net is escaped
// (dot_text.h), so any prototxt gives valid DOT, and valid XML once drawn.
std::string network_dot(const Graph& g, int ranks_per_row = kRanksPerRow);

}  // namespace bks::server
