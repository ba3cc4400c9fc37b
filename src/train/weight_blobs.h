// The weights that compression during training works on (quantization-aware training's
// rounding, pruning's masks): blob 0 of every Convolution and InnerProduct of a net.
#pragma once

#include <vector>

#include "runtime/net.h"

namespace bks {

struct WeightBlob {
  int param;         // store index
  bool output_last;  // stored [inputs, outputs] (InnerProduct's transpose) instead of [outputs, ...]
};

// Each blob once, however many nodes share it, in node order.
std::vector<WeightBlob> weight_blobs(const Net& net);

}  // namespace bks
