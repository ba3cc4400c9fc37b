// The graph IR as JSON: how bundles store an optimised inference graph. Values are listed
// by name and nodes refer to them by index; each node carries its type, attributes and
// what deploy decided for it (fused post-ops, chosen kernel, INT8 thresholds). Attributes
// are written field by field through their visitor (graph/attrs.h); a field left out reads
// as its default. Shapes and parameter bindings are not stored: loading infers them again.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "graph/graph.h"

namespace bks {

std::string graph_to_json(const Graph& g);
// InputError naming `source` when the text is not such a graph (bad JSON, missing or
// mistyped fields, indices out of range, a value read before it is written).
Graph graph_from_json(const std::string& text, const std::string& source);

// A node's attributes as the JSON object bundles store (enumerations by name; an empty
// object for a node without attributes): what other writers (ONNX export) read fields from.
nlohmann::json attrs_to_json(const Node& n);

}  // namespace bks
