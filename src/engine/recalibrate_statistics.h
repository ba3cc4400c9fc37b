// Statistics a net's layers keep themselves (BatchNorm's means and variances: the blobs their
// ops declare not learnable) estimated anew for the weights as they now are. Rewrites such as
// structured pruning leave them describing a network that no longer exists (a pruned ResNet
// scores near chance until they are).
#pragma once

#include <map>
#include <string>

#include "caffe.pb.h"
#include "core/tensor.h"

namespace bks {

// Zeroes those blobs of `weights` and runs `batches` forward passes of the net's TRAIN phase
// over its training data (no gradients, learnable weights untouched), which accumulates them
// afresh. Returns how many blobs it re-estimated (0: the net keeps none, and nothing runs).
// InputError when the TRAIN phase has no data layer to read.
int recalibrate_statistics(const proto::NetParameter& net, const std::string& source,
                           std::map<std::string, Tensor>& weights, int batches, int threads);

}  // namespace bks
