#include "engine/channel_pruning.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "engine/channel_groups.h"
#include "engine/deploy.h"
#include "formats/caffe_net.h"
#include "ops/shape_inference.h"
#include "passes/stand_in_inputs.h"
#include "runtime/param_binding.h"

namespace bks {
namespace {

// Entries `idx` of axis `axis` of t, in that order.
Tensor gather(const Tensor& t, int axis, const std::vector<int64_t>& idx) {
  Shape s = t.shape();
  const int64_t outer = shape_count(s, 0, axis), n = s[static_cast<size_t>(axis)];
  const int64_t inner = shape_count(s, axis + 1, static_cast<int>(s.size()));
  s[static_cast<size_t>(axis)] = static_cast<int64_t>(idx.size());
  Tensor r(s);
  const auto k = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      std::copy_n(t.f32() + (o * n + idx[static_cast<size_t>(j)]) * inner, inner, r.f32() + (o * k + j) * inner);
  return r;
}

// A per-channel op's blob over `channels` channels: gathered on its channel axis (its first,
// or the one axis holding them), kept whole when one entry serves all; -1 when neither.
int channel_axis(const Tensor& t, int64_t channels) {
  if (t.ndim() >= 1 && t.dim(0) == channels) return 0;
  if (t.numel() == channels)
    for (int d = 0; d < t.ndim(); ++d)
      if (t.dim(d) == channels) return d;
  return t.numel() == 1 ? -2 : -1;
}

class Pruner {
 public:
  Pruner(DeployModel& m, const NetLoad& nl, const ChannelPruneOptions& o) : m_(m), g_(m.graph), groups_(g_), o_(o) {
    find_prunable(nl);
  }

  // Each root group that may be pruned, and why the others may not (by writer).
  std::map<int, std::string> fixed_;
  std::vector<int> prunable_;

  const ChannelGroups& groups() const { return groups_; }

  std::vector<int64_t> ranked(int root, std::string& criterion) const;
  // Multiply-adds per item: the convolutions' and all, with `kept` channels of each group.
  std::pair<double, double> macs(const std::map<int, int64_t>& kept) const;
  // Shrinks m's weights and returns the nodes (by index) whose attributes changed, with them.
  std::map<int, Node> apply(const std::map<int, std::vector<int64_t>>& keep);

 private:
  void find_prunable(const NetLoad& nl);
  // Axis-1 entries of a value that stay, or nullopt when all do.
  std::optional<std::vector<int64_t>> kept_entries(const ChannelLayout& l,
                                                   const std::map<int, std::vector<int64_t>>& keep) const;
  int64_t kept_total(const ChannelLayout& l, const std::map<int, int64_t>& kept) const {
    int64_t n = 0;
    for (const ChannelRun& r : l) {
      auto it = kept.find(groups_.root(r.group));
      n += (it == kept.end() ? r.count : it->second) * r.inner;
    }
    return n;
  }

  DeployModel& m_;
  Graph& g_;
  ChannelGroups groups_;
  const ChannelPruneOptions& o_;
};

void Pruner::find_prunable(const NetLoad& nl) {
  auto fix = [&](int root, const std::string& why) { fixed_.emplace(root, why); };
  for (int r = 0; r < groups_.size(); ++r)
    if (groups_.root(r) == r && !groups_.group(r).fixed.empty()) fix(r, groups_.group(r).fixed);
  // Per-channel ops whose blobs are not per channel, or shared with another layer.
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    if (groups_.flow(static_cast<int>(n)) != ChannelFlow::per_channel || node.params.empty()) continue;
    const ChannelLayout& l = groups_.layout(node.inputs[0]);
    const int64_t c = channel_entries(l);
    std::string why;
    if (weights_shared(m_, static_cast<int>(n)))
      why = fmt::format("'{}' shares its blobs with another layer", node.name);
    for (size_t i = 0; why.empty() && i < node.params.size(); ++i)
      if (channel_axis(m_.blob(static_cast<int>(n), static_cast<int>(i)), c) == -1)
        why = fmt::format("'{}' ({}) has a blob of shape {}, not one entry per channel", node.name, node.type,
                          shape_str(m_.blob(static_cast<int>(n), static_cast<int>(i)).shape()));
    if (!why.empty())
      for (const ChannelRun& r : l) fix(groups_.root(r.group), why);
  }
  // The TRAIN phase must allow it too: its own readers of the channels (a loss on a
  // hidden layer) and writers.
  Graph train = build_caffe_graph(nl, net_state(nl, proto::TRAIN, {}));
  stand_in_absent_data(train, proto::TRAIN, {});
  infer_shapes(train, proto::TRAIN);
  const ChannelGroups tg(train);
  for (int r = 0; r < groups_.size(); ++r) {
    if (groups_.root(r) != r || groups_.group(r).writers.empty() || fixed_.count(r)) continue;
    const ChannelGroups::Group& grp = groups_.group(r);
    std::set<std::string> names;
    for (int w : grp.writers) {
      names.insert(g_.nodes[static_cast<size_t>(w)].name);
      if (weights_shared(m_, w)) fix(r, fmt::format("'{}' shares its weights", g_.nodes[static_cast<size_t>(w)].name));
    }
    if (grp.channels < 2) fix(r, "it has one channel");
    for (int w : grp.writers) {
      const std::string& name = g_.nodes[static_cast<size_t>(w)].name;
      for (size_t t = 0; t < train.nodes.size(); ++t) {
        if (train.nodes[t].name != name) continue;
        const int tr = tg.written_by(static_cast<int>(t));
        if (tr < 0) {
          fix(r, "in the TRAIN phase, it is not a Convolution / InnerProduct's output");
          continue;
        }
        std::set<std::string> train_names;
        for (int tw : tg.group(tr).writers) train_names.insert(train.nodes[static_cast<size_t>(tw)].name);
        if (!tg.group(tr).fixed.empty()) fix(r, "in the TRAIN phase, " + tg.group(tr).fixed);
        if (train_names != names) fix(r, "in the TRAIN phase, other layers write the same channels");
      }
    }
    if (!fixed_.count(r)) prunable_.push_back(r);
  }
}

std::vector<int64_t> Pruner::ranked(int root, std::string& criterion) const {
  const ChannelGroups::Group& grp = groups_.group(root);
  std::vector<double> score(static_cast<size_t>(grp.channels), 0.0);
  criterion = o_.criterion;
  bool found = false;
  if (o_.criterion == "bn") {
    // The scale of the last per-channel affine op the channels pass through (Caffe's
    // BatchNorm + Scale: the Scale's gamma).
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const Node& node = g_.nodes[n];
      if (!op_traits(node).per_channel_affine || node.inputs.empty()) continue;
      const ChannelLayout& l = groups_.layout(node.inputs[0]);
      std::vector<const Tensor*> blobs;
      for (size_t i = 0; i < node.params.size(); ++i)
        blobs.push_back(&m_.blob(static_cast<int>(n), static_cast<int>(i)));
      std::vector<double> a, b;
      if (!op_def(g_, static_cast<int>(n)).channel_affine(node, blobs, channel_entries(l), a, b)) continue;
      int64_t off = 0;
      for (const ChannelRun& r : l) {
        if (groups_.root(r.group) == root && r.inner == 1) {
          for (int64_t c = 0; c < r.count; ++c)
            score[static_cast<size_t>(c)] = std::abs(a[static_cast<size_t>(off + c)]);
          found = true;
        }
        off += r.count * r.inner;
      }
    }
    if (!found) criterion = "l1 (no BN scale)";
  }
  if (!found) {
    // Each writer's filter norms over their mean, summed: writers joined by an Eltwise count alike.
    for (int w : grp.writers) {
      const Tensor& wt = m_.blob(w, 0);
      const bool out_last = op_def(g_, w).weights_output_last(g_.nodes[static_cast<size_t>(w)]);
      const int64_t outs = grp.channels, per = wt.numel() / outs;
      std::vector<double> norm(static_cast<size_t>(outs), 0.0);
      for (int64_t c = 0; c < outs; ++c)
        for (int64_t j = 0; j < per; ++j) {
          const float x = out_last ? wt.f32()[j * outs + c] : wt.f32()[c * per + j];
          norm[static_cast<size_t>(c)] += o_.criterion == "l2" ? double{x} * x : std::abs(x);
        }
      const double mean = std::accumulate(norm.begin(), norm.end(), 0.0) / static_cast<double>(outs);
      for (int64_t c = 0; c < outs; ++c)
        score[static_cast<size_t>(c)] += mean > 0 ? norm[static_cast<size_t>(c)] / mean : 0.0;
    }
  }
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  return order;  // the most important first
}

std::pair<double, double> Pruner::macs(const std::map<int, int64_t>& kept) const {
  double conv = 0, all = 0;
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    const ChannelFlow f = groups_.flow(static_cast<int>(n));
    const OpTraits t = op_traits(node);
    if (!t.weighted_linear || node.params.empty() || (f != ChannelFlow::mixes && f != ChannelFlow::per_channel))
      continue;
    const int out = node.outputs.at(0), in = node.inputs.at(0);
    const Shape& s = g_.values[static_cast<size_t>(out)].shape;
    if (s.size() < 2 || s[0] == 0 || s[1] == 0) continue;
    const ChannelLayout &lo = groups_.layout(out), &li = groups_.layout(in);
    const double per_item_out = static_cast<double>(shape_numel(s) / s[0]) * kept_total(lo, kept) / s[1];
    const double per_output = static_cast<double>(m_.blob(static_cast<int>(n), 0).numel()) / s[1];
    const double in_share = f == ChannelFlow::mixes
                                ? static_cast<double>(kept_total(li, kept)) / static_cast<double>(channel_entries(li))
                                : 1.0;
    const double x = per_item_out * per_output * in_share;
    all += x;
    if (t.convolution) conv += x;
  }
  return {conv, all};
}

std::optional<std::vector<int64_t>> Pruner::kept_entries(const ChannelLayout& l,
                                                         const std::map<int, std::vector<int64_t>>& keep) const {
  bool any = false;
  for (const ChannelRun& r : l) any = any || keep.count(groups_.root(r.group));
  if (!any) return std::nullopt;
  std::vector<int64_t> idx;
  int64_t off = 0;
  for (const ChannelRun& r : l) {
    auto it = keep.find(groups_.root(r.group));
    std::vector<int64_t> all;
    if (it == keep.end()) {
      all.resize(static_cast<size_t>(r.count));
      std::iota(all.begin(), all.end(), 0);
    }
    for (int64_t c : it == keep.end() ? all : it->second)
      for (int64_t i = 0; i < r.inner; ++i) idx.push_back(off + c * r.inner + i);
    off += r.count * r.inner;
  }
  return idx;
}

std::map<int, Node> Pruner::apply(const std::map<int, std::vector<int64_t>>& keep) {
  std::map<int, Node> changed;
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const int ni = static_cast<int>(n);
    const Node& node = g_.nodes[n];
    const ChannelFlow f = groups_.flow(ni);
    if ((f != ChannelFlow::mixes && f != ChannelFlow::per_channel) || node.inputs.empty()) continue;
    const OpDef& def = op_def(g_, ni);
    const ChannelLayout& li = groups_.layout(node.inputs[0]);
    const auto in_idx = kept_entries(li, keep);
    Node resized = node;
    bool resize = false;
    if (f == ChannelFlow::per_channel && in_idx) {
      const int64_t c = channel_entries(li);
      for (size_t i = 0; i < node.params.size(); ++i) {
        Tensor& t = m_.blob(ni, static_cast<int>(i));
        const int axis = channel_axis(t, c);
        if (axis >= 0) t = gather(t, axis, *in_idx);
      }
      def.set_channels(resized, static_cast<int64_t>(in_idx->size()));
      resize = true;
    }
    if (f == ChannelFlow::mixes && !node.params.empty()) {
      const bool out_last = def.weights_output_last(node);
      Tensor& w = m_.blob(ni, 0);
      if (in_idx) {
        // An InnerProduct reading (N, C, H, W) has H x W columns per channel.
        const Shape& s = g_.values[static_cast<size_t>(node.inputs[0])].shape;
        const int64_t rest = shape_count(s, 2, static_cast<int>(s.size())), total = channel_entries(li);
        const int axis = out_last ? 0 : 1;
        std::vector<int64_t> cols;
        if (w.dim(axis) == total) {
          cols = *in_idx;
        } else if (w.dim(axis) == total * rest) {
          for (int64_t i : *in_idx)
            for (int64_t j = 0; j < rest; ++j) cols.push_back(i * rest + j);
        } else {
          runtime_error("prune-channels: {} has weights {} for an input of {}", g_.describe(ni), shape_str(w.shape()),
                        shape_str(s));
        }
        w = gather(w, axis, cols);
      }
      auto it = keep.find(groups_.written_by(ni));
      if (it != keep.end()) {
        w = gather(w, out_last ? 1 : 0, it->second);
        for (size_t i = 1; i < node.params.size(); ++i) {
          Tensor& b = m_.blob(ni, static_cast<int>(i));
          b = gather(b, 0, it->second);
        }
        def.set_channels(resized, static_cast<int64_t>(it->second.size()));
        resize = true;
      }
    }
    if (resize) changed.emplace(ni, std::move(resized));
  }
  return changed;
}

// The pruned net must build in both phases with exactly the pruned blobs' shapes.
void verify(const ChannelPruneResult& r, const std::string& model) {
  NetLoad nl;
  nl.param = r.net;
  nl.source = model + " (pruned)";
  for (Phase phase : {proto::TEST, proto::TRAIN}) {
    Graph g = build_caffe_graph(nl, net_state(nl, phase, {}));
    stand_in_absent_data(g, phase, {});
    infer_shapes(g, phase);
    const ParamDecls decls = declared_params(g, phase);
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      const std::vector<ParamDecl> d = decls(static_cast<int>(n));
      for (size_t i = 0; i < d.size(); ++i) {
        auto w = r.weights.find(fmt::format("{}.{}", g.nodes[n].name, i));
        if (w != r.weights.end() && w->second.shape() != d[i].shape)
          runtime_error("prune-channels: {} wants blob {} of shape {}, but pruning made it {}",
                        g.describe(static_cast<int>(n)), i, shape_str(d[i].shape), shape_str(w->second.shape()));
      }
    }
  }
}

void check_options(const ChannelPruneOptions& o) {
  const bool ratio = o.ratio != -1, flops = o.flops != -1;
  if (ratio == flops) input_error("give either --ratio (of each layer's channels) or --flops (of the multiply-adds)");
  if (ratio && !(o.ratio >= 0 && o.ratio < 1)) input_error("--ratio must be in [0, 1), got {}", o.ratio);
  if (flops && !(o.flops > 0 && o.flops < 1)) input_error("--flops must be in (0, 1), got {}", o.flops);
  if (o.multiple < 1) input_error("--multiple must be at least 1, got {}", o.multiple);
  if (o.criterion != "l1" && o.criterion != "l2" && o.criterion != "bn")
    input_error("--criterion must be l1, l2 or bn, got '{}'", o.criterion);
}

}  // namespace

ChannelPruneResult prune_channels(const std::string& model, const std::string& weights, const ChannelPruneOptions& o) {
  check_options(o);
  DeployOptions d;
  d.model = model;
  d.weights = weights;
  const NetLoad nl = load_net_file(model);
  DeployModel m = load_deploy_model(d, nl);
  Pruner p(m, nl, o);
  const Graph& g = m.graph;
  const ChannelGroups& groups = p.groups();
  ChannelPruneResult r;
  // Which groups: all that may be pruned, or those the named layers write.
  std::vector<int> chosen = o.layers.empty() ? p.prunable_ : std::vector<int>{};
  for (const std::string& name : o.layers) {
    int root = -1;
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (g.nodes[n].name == name) root = groups.written_by(static_cast<int>(n));
    if (root < 0) input_error("--layers {}: {} has no Convolution or InnerProduct of that name", name, model);
    if (p.fixed_.count(root))
      input_error("--layers {}: its output channels must stay as they are: {}", name, p.fixed_.at(root));
    if (std::find(chosen.begin(), chosen.end(), root) == chosen.end()) chosen.push_back(root);
  }
  for (int root = 0; root < groups.size(); ++root)
    if (p.fixed_.count(root) && !groups.group(root).writers.empty())
      for (int w : groups.group(root).writers)
        r.kept_whole.push_back(fmt::format("{}: {}", g.nodes[static_cast<size_t>(w)].name, p.fixed_.at(root)));
  if (chosen.empty())
    input_error("{}: no layer's output channels can be pruned ({})", model,
                r.kept_whole.empty() ? std::string("it has no Convolution or InnerProduct") : r.kept_whole.front());

  auto counts = [&](double ratio) {
    std::map<int, int64_t> kept;
    for (int root : chosen) {
      const int64_t c = groups.group(root).channels;
      int64_t k = std::max<int64_t>(1, c - static_cast<int64_t>(std::floor(ratio * static_cast<double>(c) + 1e-9)));
      // To the nearest multiple (vector kernels pad channels to theirs), never more than c.
      if (o.multiple > 1 && k < c)
        k = std::min(c, std::max(o.multiple, (k + o.multiple / 2) / o.multiple * o.multiple));
      kept[root] = k;
    }
    return kept;
  };
  std::tie(r.conv_macs_before, r.macs_before) = p.macs({});
  r.ratio = o.ratio;
  if (o.flops != -1) {
    // The smallest ratio, in steps of 1%, that removes that share of the multiply-adds.
    const bool conv = r.conv_macs_before > 0;
    const double before = conv ? r.conv_macs_before : r.macs_before;
    r.ratio = -1;
    double best = 0;
    for (int k = 1; k < 100 && r.ratio < 0; ++k) {
      auto [c, a] = p.macs(counts(k / 100.0));
      const double removed = before > 0 ? 1.0 - (conv ? c : a) / before : 0.0;
      best = std::max(best, removed);
      if (removed >= o.flops) r.ratio = k / 100.0;
    }
    if (r.ratio < 0)
      input_error(
          "--flops {}: removing 99% of the channels removes {:.1f}% of the {} multiply-adds; more would empty layers",
          o.flops, 100 * best, conv ? "convolutions'" : "inner products'");
  }
  const std::map<int, int64_t> kept = counts(r.ratio);
  std::tie(r.conv_macs_after, r.macs_after) = p.macs(kept);
  std::map<int, std::vector<int64_t>> keep;
  for (int root : chosen) {
    PrunedGroup pg;
    for (int w : groups.group(root).writers) pg.layers.push_back(g.nodes[static_cast<size_t>(w)].name);
    pg.channels = groups.group(root).channels;
    pg.kept = kept.at(root);
    std::vector<int64_t> order = p.ranked(root, pg.criterion);
    if (pg.kept < pg.channels) {
      order.resize(static_cast<size_t>(pg.kept));
      std::sort(order.begin(), order.end());
      keep[root] = std::move(order);
    }
    r.groups.push_back(std::move(pg));
  }
  const std::map<int, Node> changed = p.apply(keep);
  r.weights = weights_by_layer(m);
  r.net = nl.param;
  // Layers whose attributes count channels get them written anew (every copy: a layer may
  // be given once per phase).
  for (const auto& [n, node] : changed) {
    const AttrsKind* kind = find_attrs(node.type);
    if (!kind || !node.attrs) continue;
    proto::LayerParameter before, after;
    kind->to_caffe(*g.nodes[static_cast<size_t>(n)].attrs.get(), before);
    kind->to_caffe(*node.attrs.get(), after);
    if (before.SerializeAsString() == after.SerializeAsString()) continue;
    for (proto::LayerParameter& l : *r.net.mutable_layer())
      if (l.name() == node.name) kind->to_caffe(*node.attrs.get(), l);
  }
  verify(r, model);
  return r;
}

}  // namespace bks
