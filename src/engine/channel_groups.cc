#include "engine/channel_groups.h"

#include <fmt/format.h>

#include <algorithm>

namespace bks {

int64_t channel_entries(const ChannelLayout& l) {
  int64_t n = 0;
  for (const ChannelRun& r : l) n += r.count * r.inner;
  return n;
}

int ChannelGroups::root(int group) const {
  while (parent_.at(static_cast<size_t>(group)) != group) group = parent_[static_cast<size_t>(group)];
  return group;
}

int ChannelGroups::written_by(int node) const {
  const int g = written_.at(static_cast<size_t>(node));
  return g < 0 ? -1 : root(g);
}

int ChannelGroups::add_group(int64_t channels, const std::string& fixed) {
  groups_.push_back({channels, {}, fixed});
  parent_.push_back(static_cast<int>(parent_.size()));
  return static_cast<int>(groups_.size()) - 1;
}

void ChannelGroups::join(int a, int b) {
  a = root(a), b = root(b);
  if (a == b) return;
  // The group with more writers stays the root, so that a long chain of joins copies each
  // writer a logarithmic number of times, not once per join.
  if (groups_[static_cast<size_t>(a)].writers.size() < groups_[static_cast<size_t>(b)].writers.size()) std::swap(a, b);
  parent_[static_cast<size_t>(b)] = a;
  Group &ga = groups_[static_cast<size_t>(a)], &gb = groups_[static_cast<size_t>(b)];
  ga.writers.insert(ga.writers.end(), gb.writers.begin(), gb.writers.end());
  if (ga.fixed.empty()) ga.fixed = gb.fixed;
}

void ChannelGroups::fix(const ChannelLayout& l, const std::string& why) {
  for (const ChannelRun& r : l) {
    Group& g = groups_[static_cast<size_t>(root(r.group))];
    if (g.fixed.empty()) g.fixed = why;
  }
}

ChannelGroups::ChannelGroups(const Graph& g)
    : layouts_(g.values.size()), flows_(g.nodes.size(), ChannelFlow::blocks), written_(g.nodes.size(), -1) {
  // Graph inputs (a deploy net's Input values have producers; the deprecated net-level
  // inputs do not): channels from outside.
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].producer < 0 && g.values[v].shape.size() >= 2)
      layouts_[v] = {{add_group(g.values[v].shape[1], "the net's input"), g.values[v].shape[1], 1}};
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    std::vector<Shape> in;
    for (int v : node.inputs) in.push_back(g.values[static_cast<size_t>(v)].shape);
    const OpDef* def = OpDefRegistry::get().find(node.type);
    ChannelFlow flow = def ? def->channel_flow(node, in) : ChannelFlow::blocks;
    const std::string who = fmt::format("read by '{}' ({})", node.name, node.type);
    // Every input the flow follows must have channels.
    if (flow != ChannelFlow::blocks)
      for (int v : node.inputs)
        if (layouts_[static_cast<size_t>(v)].empty()) flow = ChannelFlow::blocks;
    if (flow == ChannelFlow::mixes && node.inputs.size() != 1) flow = ChannelFlow::blocks;
    std::vector<ChannelLayout> out(node.outputs.size());
    if (flow == ChannelFlow::per_channel) {
      // The inputs' runs must match one for one; an Eltwise's inputs then become one group.
      const ChannelLayout& first = layouts_[static_cast<size_t>(node.inputs[0])];
      bool same = true;
      for (int v : node.inputs) {
        const ChannelLayout& l = layouts_[static_cast<size_t>(v)];
        same = same && l.size() == first.size();
        for (size_t r = 0; same && r < l.size(); ++r)
          same = l[r].count == first[r].count && l[r].inner == first[r].inner;
      }
      if (same) {
        for (int v : node.inputs)
          for (size_t r = 0; r < first.size(); ++r) join(first[r].group, layouts_[static_cast<size_t>(v)][r].group);
        for (ChannelLayout& o : out) o = first;
      } else {
        flow = ChannelFlow::blocks;
      }
    } else if (flow == ChannelFlow::concat) {
      // A Concat of a value with itself doubles its runs: nested, a crafted net could ask
      // for billions. Past kMaxRuns the concat's inputs are fixed instead.
      constexpr size_t kMaxRuns = 4096;
      size_t runs = 0;
      for (int v : node.inputs) runs += layouts_[static_cast<size_t>(v)].size();
      if (runs > kMaxRuns) flow = ChannelFlow::blocks;
    }
    if (flow == ChannelFlow::concat) {
      for (int v : node.inputs) {
        const ChannelLayout& l = layouts_[static_cast<size_t>(v)];
        out[0].insert(out[0].end(), l.begin(), l.end());
      }
    } else if (flow == ChannelFlow::flatten) {
      int64_t spatial = 1;
      for (size_t d = 2; d < in[0].size(); ++d) spatial *= in[0][d];
      out[0] = layouts_[static_cast<size_t>(node.inputs[0])];
      for (ChannelRun& r : out[0]) r.inner *= spatial;
    } else if (flow == ChannelFlow::mixes) {
      const Shape& s = g.values[static_cast<size_t>(node.outputs.at(0))].shape;
      if (s.size() >= 2) {
        written_[n] = add_group(s[1], "");
        groups_.back().writers.push_back(static_cast<int>(n));
        out[0] = {{written_[n], s[1], 1}};
      }
    }
    if (flow == ChannelFlow::blocks)
      for (int v : node.inputs) fix(layouts_[static_cast<size_t>(v)], who);
    flows_[n] = flow;
    // Each output's runs, checked against its shape (a fixed group where they disagree or
    // the flow says nothing of it).
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const Shape& s = g.values[static_cast<size_t>(node.outputs[k])].shape;
      ChannelLayout& l = layouts_[static_cast<size_t>(node.outputs[k])];
      if (s.size() < 2) continue;
      if (!out[k].empty() && channel_entries(out[k]) == s[1]) {
        l = out[k];
        continue;
      }
      fix(out[k], who);
      l = {{add_group(s[1], fmt::format("written by '{}' ({})", node.name, node.type)), s[1], 1}};
    }
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].consumers.empty()) fix(layouts_[v], fmt::format("a net output ('{}')", g.values[v].name));
}

}  // namespace bks
