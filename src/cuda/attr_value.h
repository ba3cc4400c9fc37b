// Reads one scalar attribute of a node by its name, for kernels whose op keeps its attribute
// struct private to its own file (ops/activations.cc): the name is the one the struct's
// visit() gives, the same the bundles' JSON uses.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace bks::cuda {

float attr_float(const Node& n, const char* name, float fallback);
int64_t attr_int(const Node& n, const char* name, int64_t fallback);

}  // namespace bks::cuda
