// Which channels of a graph can be removed together (structured pruning,
// engine/channel_pruning.h). Channels are followed through the graph by each op's
// ChannelFlow (ops/op_def.h):
// - a Convolution or InnerProduct (mixes) writes a new group of channels;
// - per-channel ops (ReLU, BatchNorm, Scale, Pooling, a depthwise convolution, Eltwise)
//   pass their input's channels on, and an Eltwise joins its inputs' groups into one: a
//   residual block's convolutions lose the same channels;
// - Concat lays its inputs' groups side by side, Flatten turns each channel into a run;
// - anything else (a loss, Softmax, Reshape, a net output) fixes the channels reaching it.
// A group can be pruned when only Convolutions / InnerProducts write it and nothing fixes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op_def.h"

namespace bks {

// A run of a value's axis 1: `count` channels of group `group`, each `inner` entries long
// (more than 1 after a Flatten).
struct ChannelRun {
  int group = 0;
  int64_t count = 0, inner = 1;
};
using ChannelLayout = std::vector<ChannelRun>;
// The entries of axis 1 a layout covers.
int64_t channel_entries(const ChannelLayout& l);

class ChannelGroups {
 public:
  // The analysis of a graph whose shapes are inferred.
  explicit ChannelGroups(const Graph& g);

  struct Group {
    int64_t channels = 0;
    std::vector<int> writers;  // the Convolution / InnerProduct nodes writing them
    std::string fixed;         // why they must stay ("" if they can be pruned)
  };
  // The group a run's group index now belongs to (groups joined by an Eltwise are one).
  int root(int group) const;
  const Group& group(int root) const { return groups_.at(static_cast<size_t>(root)); }
  int size() const { return static_cast<int>(groups_.size()); }
  // Each value's axis-1 runs (empty for values of fewer than 2 axes).
  const ChannelLayout& layout(int value) const { return layouts_.at(static_cast<size_t>(value)); }
  ChannelFlow flow(int node) const { return flows_.at(static_cast<size_t>(node)); }
  // The root group a Convolution / InnerProduct writes, or -1 (not such a node).
  int written_by(int node) const;

 private:
  int add_group(int64_t channels, const std::string& fixed);
  void join(int a, int b);
  void fix(const ChannelLayout& l, const std::string& why);

  std::vector<Group> groups_;
  std::vector<int> parent_;
  std::vector<ChannelLayout> layouts_;
  std::vector<ChannelFlow> flows_;
  std::vector<int> written_;  // per node: its group (before joins), or -1
};

}  // namespace bks
