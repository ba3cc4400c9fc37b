// Structured pruning (bakusoku prune-channels, docs/compression.md): the least important
// output channels of Convolution and InnerProduct layers are removed from a trained net,
// which physically shrinks: the layer's filters and bias, the per-channel blobs after it
// (BatchNorm, Scale, PReLU, a depthwise convolution's filters) and its readers' input
// channels (a convolution's weights' axis 1, an InnerProduct's columns), through Concat,
// Flatten and Eltwise (engine/channel_groups.h). The result is a Caffe net and weights file
// like any other: fine-tune it with train --weights, deploy it, time it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "core/tensor.h"

namespace bks {

struct ChannelPruneOptions {
  double ratio = -1;                // remove this fraction of every group's channels, or ...
  double flops = -1;                // ... the smallest such fraction (in steps of 1%) removing this fraction of
                                    // the convolutions' multiply-adds (the inner products' when there are none)
  std::string criterion = "l1";     // how channels rank: l1 or l2 of their filters, or bn (|scale|)
  std::vector<std::string> layers;  // prune only the groups these layers write (empty: every group)
  int64_t multiple = 1;             // keep a multiple of this many channels (nearest; at least one multiple)
};

struct PrunedGroup {
  std::vector<std::string> layers;  // the Convolutions / InnerProducts writing the channels
  int64_t channels = 0, kept = 0;
  std::string criterion;  // as ranked ("l1 (no BN scale)" where bn found none)
};

struct ChannelPruneResult {
  proto::NetParameter net;                // the model with the smaller layers
  std::map<std::string, Tensor> weights;  // every blob, "<layer>.<index>"
  std::vector<PrunedGroup> groups;
  std::vector<std::string> kept_whole;  // "<layer>: <why>" for each writer left as it was
  double ratio = 0;
  // Multiply-adds per item of the Convolutions, and of every Convolution and InnerProduct.
  double conv_macs_before = 0, conv_macs_after = 0, macs_before = 0, macs_after = 0;
};

// The pruning of the model (a train/test or deploy prototxt) with its weights. InputError for a
// ratio outside [0, 1), a FLOPs fraction outside (0, 1) or one no ratio below 1 reaches (that
// would empty layers), both or neither given, an unknown criterion, and a --layers name that is
// no Convolution / InnerProduct of the model or whose channels must stay (saying why).
ChannelPruneResult prune_channels(const std::string& model, const std::string& weights, const ChannelPruneOptions& o);

}  // namespace bks
