#include "engine/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "core/worse.h"
#include "engine/graph_cut.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "profile/profiler.h"

namespace bks {

int64_t bundle_micro_batch(const Bundle& b, const std::string& source) {
  auto it = b.info.find("micro_batch");
  if (it == b.info.end()) return 0;
  int64_t m = 0;
  const std::string& s = it->second;
  const bool digits =
      !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) m = std::stoll(s);
  if (m <= 0) input_error("{}: corrupt bundle: micro_batch '{}' is not a positive integer", source, s);
  return m;
}

namespace {

// The shapes external input node k gives its outputs, from its definition alone.
std::vector<Shape> declared_shapes(const Graph& g, int k) {
  const Node& n = g.nodes[k];
  std::vector<Shape> takes(n.outputs.size());
  op_def(g, k).infer(OpContext{n, g.describe(k), proto::TEST}, {}, takes);
  return takes;
}

// The batch of the graph's first external input (0 when it has none).
int64_t input_batch(const Graph& g) {
  for (int k = 0; k < static_cast<int>(g.nodes.size()); ++k)
    if (op_traits(g.nodes[k]).external_input) {
      std::vector<Shape> shapes = declared_shapes(g, k);
      if (!shapes.empty() && !shapes[0].empty()) return shapes[0][0];
    }
  return 0;
}

// Whether every input and output of `net` has `m` items first (so parts of a batch are
// slices of it), no value's batch comes from the data, and no op mixes the items.
bool runs_in_parts(const Net& net, int64_t m) {
  const Graph& g = net.graph();
  for (const Node& n : g.nodes)
    if (op_traits(n).mixes_axis0) return false;
  std::vector<int> edges = net.inputs();
  edges.insert(edges.end(), net.outputs().begin(), net.outputs().end());
  for (int v : edges)
    if (g.values[v].shape.empty() || g.values[v].shape[0] != m || net.is_blocked(v)) return false;
  const std::vector<bool>& from_data = net.plan().batch_from_data;
  return std::none_of(from_data.begin(), from_data.end(), [](bool d) { return d; });
}

}  // namespace

InferenceSession::InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch,
                                   int64_t micro_batch, std::optional<std::string> parts_until) {
  // The net of `graph` at `items` per forward (0: as the graph says).
  auto build = [&](Graph graph, int64_t items) {
    if (items > 0) set_input_batch(graph, items);
    return build_bundle_net(b, std::move(graph), source, threads, inference_options(b, source));
  };
  // It becomes the net the session runs (part by part when in parts).
  auto use = [&](Graph graph, int64_t items) {
    bundle_net_ = build(std::move(graph), items);
    net_ = bundle_net_->net.get();
    inputs_ = net_->inputs();
  };
  int64_t m = micro_batch < 0 ? bundle_micro_batch(b, source) : micro_batch;
  const int64_t whole = m > 0 ? (batch > 0 ? batch : input_batch(b.graph)) : 0;
  if (!(m > 0 && m < whole && whole % m == 0)) m = 0;
  if (!parts_until) {
    auto it = b.info.find(kPartsUntilKey);
    parts_until = it == b.info.end() ? std::string() : it->second;
  }
  std::optional<GraphCut> cut;
  if (m > 0 && !parts_until->empty()) {
    const Node* last = b.graph.find_node(*parts_until);
    if (last) cut = cut_graph_after(b.graph, static_cast<int>(last - b.graph.nodes.data()));
    if (!cut)
      input_error("{}: {} '{}' names no node the graph can be cut after", source, kPartsUntilKey,
                  parts_until->substr(0, 200));
  }
  use(cut ? cut->head : b.graph, m > 0 ? m : batch);
  if (inputs_.empty()) input_error("{}: the bundle's graph has no Input layer", source);
  if (m > 0 && !runs_in_parts(*net_, m)) {
    m = 0;  // not batch-sliceable after all: whole
    cut.reset();
    use(b.graph, batch);
  }
  batch_ = net_->graph().values[inputs_[0]].shape.at(0);
  outputs_ = net_->outputs();
  if (m > 0) {
    micro_ = m;
    batch_ = whole;
    std::vector<int> edges = inputs_;
    if (cut) {
      handed_ = net_->outputs().at(0);
      if (net_->value(handed_).dtype() != DType::f32)  // int8 or bf16 for a reader after the cut
        input_error("{}: {} '{}': the graph cannot be cut where it hands over {} values", source, kPartsUntilKey,
                    *parts_until, dtype_name(net_->value(handed_).dtype()));
      // The tail's Input gives the handed value's shape (bundles keep no shapes) at all N items.
      Shape handed = net_->graph().values[handed_].shape;
      handed.at(0) = whole;
      make_external_input(cut->tail.nodes.at(0), {handed});
      tail_net_ = build(cut->tail, whole);
      tail_input_ = tail_net_->net->inputs().at(0);
      tail_offset_ = static_cast<int>(net_->graph().values.size());
      outputs_.clear();
      for (int v : tail_net_->net->outputs()) outputs_.push_back(v + tail_offset_);
    } else {
      edges.insert(edges.end(), net_->outputs().begin(), net_->outputs().end());
    }
    for (int v : edges) {
      const Tensor& part = net_->value(v);
      Shape s = part.shape();
      s[0] = whole;
      whole_.emplace(v, Tensor(s, part.dtype()));
    }
  }
}

InferenceSession::~InferenceSession() = default;

const std::string& InferenceSession::value_name(int v) const {
  if (tail_net_ && v >= tail_offset_) return tail_net_->net->graph().values[v - tail_offset_].name;
  return net_->graph().values[v].name;
}

Tensor& InferenceSession::value(int v) {
  if (tail_net_ && v >= tail_offset_) return tail_net_->net->value(v - tail_offset_);
  auto it = whole_.find(v);
  return it != whole_.end() ? it->second : net_->value(v);
}

size_t InferenceSession::planned_bytes() const {
  return net_->planned_bytes() + (tail_net_ ? tail_net_->net->planned_bytes() : 0);
}

void InferenceSession::run() {
  if (!micro_) {
    net_->forward();
    return;
  }
  auto slice = [&](const Tensor& part, Tensor& all, int64_t first) {
    std::memcpy(static_cast<char*>(all.raw()) + first / micro_ * part.bytes(), part.raw(), part.bytes());
  };
  for (int64_t first = 0; first < batch_; first += micro_) {
    for (int v : inputs_) {
      Tensor& part = net_->value(v);
      std::memcpy(part.raw(), static_cast<const char*>(whole_.at(v).raw()) + first / micro_ * part.bytes(),
                  part.bytes());
    }
    net_->forward();
    if (tail_net_) {
      // A net writes its outputs plain, as the tail's Input takes them.
      BKS_CHECK(!net_->is_blocked(handed_), "the value handed to the tail is in a blocked layout");
      slice(net_->value(handed_), tail_net_->net->value(tail_input_), first);
    } else {
      for (int v : net_->outputs()) slice(net_->value(v), whole_.at(v), first);
    }
  }
  if (tail_net_) tail_net_->net->forward();
}

double max_relative_difference(InferenceSession& a, InferenceSession& b) {
  if (a.outputs().size() != b.outputs().size()) return INFINITY;
  double worst = 0;
  for (size_t k = 0; k < a.outputs().size(); ++k) {
    const Tensor &x = a.value(a.outputs()[k]), &y = b.value(b.outputs()[k]);
    if (x.shape() != y.shape() || x.dtype() != DType::f32 || y.dtype() != DType::f32) return INFINITY;
    double scale = 1e-30, gap = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(x.f32()[i])));
      gap = worse(gap, std::fabs(static_cast<double>(x.f32()[i]) - y.f32()[i]));
    }
    worst = worse(worst, gap / scale);
  }
  return worst;
}

void fill_timing_inputs(InferenceSession& s, uint64_t seed) {
  Rng rng(seed);
  for (int v : s.inputs()) {
    Tensor& t = s.value(v);
    // 0 or 1: values for any layer, indices for an Embed.
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(0.f, 1.f) < 0.5f ? 0.f : 1.f;
  }
}

std::vector<double> time_nodes(InferenceSession& s, int iterations) {
  std::vector<Net*> nets = {&s.net()};
  if (s.tail()) nets.push_back(s.tail());
  s.run();
  std::vector<Profiler> prof(nets.size());
  for (size_t i = 0; i < nets.size(); ++i) {
    prof[i].resize(nets[i]->num_nodes());
    nets[i]->set_profiler(&prof[i]);
  }
  for (int i = 0; i < iterations; ++i) s.run();
  std::vector<double> ms;
  for (size_t i = 0; i < nets.size(); ++i) {
    nets[i]->set_profiler(nullptr);
    for (int k = i ? 1 : 0; k < nets[i]->num_nodes(); ++k)  // the tail's Input is not the bundle's
      ms.push_back(prof[i].total_ms(k, Profiler::Pass::forward) / std::max(iterations, 1));
  }
  return ms;
}

NetOptions inference_options(const Bundle& b, const std::string& source) {
  NetOptions opt;
  opt.constant_params = true;  // the weights are the bundle's, fixed
  auto it = b.info.find(kActivationLayoutKey);
  if (it != b.info.end()) {
    if (it->second != kBlockedLayout)
      input_error("{}: corrupt bundle: {} '{}' is not '{}'", source, kActivationLayoutKey, it->second, kBlockedLayout);
    opt.blocked_activations = true;
  }
  return opt;
}

Precision bundle_precision(const Bundle& b) {
  auto it = b.info.find("precision");
  return it == b.info.end() ? Precision::fp32 : parse_precision(it->second, "the bundle's precision");
}

std::unique_ptr<BundleNet> build_bundle_net(const Bundle& b, Graph graph, const std::string& source, int threads,
                                            NetOptions options) {
  graph.source = source;
  auto r = std::make_unique<BundleNet>();
  r->backend = std::make_unique<CpuBackend>(threads);
  r->net = std::make_unique<Net>(std::move(graph), proto::TEST, r->store, *r->backend, 1, options);
  // Data fed in another way (a dataset to score on) must have the items the bundle takes;
  // otherwise the first mismatch would surface as a weight of the wrong shape.
  // The bundle's inputs take the shapes their definition gives (no other node is needed).
  for (int k = 0; k < static_cast<int>(b.graph.nodes.size()); ++k) {
    const Node& n = b.graph.nodes[k];
    if (!op_traits(n).external_input) continue;
    const std::vector<Shape> takes = declared_shapes(b.graph, k);
    for (size_t j = 0; j < takes.size(); ++j) {
      const std::string& name = b.graph.values[n.outputs[j]].name;
      int u = r->net->graph().find_value(name);
      if (u < 0) continue;
      const Shape& got = r->net->graph().values[u].shape;
      const Shape& want = takes[j];
      if (got.size() != want.size() || !std::equal(got.begin() + 1, got.end(), want.begin() + 1))
        input_error("{}: the data gives '{}' items of shape {} but the bundle takes {} (batch first)", source, name,
                    shape_str(got), shape_str(want));
    }
  }
  copy_bundle_weights(b, source, r->store);
  return r;
}

void copy_bundle_weights(const Bundle& b, const std::string& source, ParamStore& store) {
  for (auto& p : store.all()) {
    auto it = b.weights.find(p.key);
    if (it == b.weights.end()) input_error("{}: corrupt bundle: no tensor '{}'", source, p.key);
    if (it->second.shape() != p.data.shape() || it->second.dtype() != DType::f32)
      input_error("{}: corrupt bundle: tensor '{}' is {} {}, the graph needs F32 {}", source, p.key,
                  dtype_name(it->second.dtype()), shape_str(it->second.shape()), shape_str(p.data.shape()));
    p.data.copy_from(it->second);
  }
}

Graph scoring_net(const Bundle& b, const std::string& source, const std::string& data_source) {
  auto it = b.info.find("data_layers");
  if (it == b.info.end())
    input_error(
        "{}: the bundle records no data layer (it was deployed from a deploy prototxt); "
        "score it from a train/test prototxt's bundle",
        source);
  NetLoad data;
  data.source = source + " (recorded data layers)";
  parse_prototxt_string(it->second, data.source, data.param);
  if (data.param.layer_size() == 0) input_error("{}: corrupt bundle: empty data_layers", source);
  proto::LayerParameter& d = *data.param.mutable_layer(0);
  if (!data_source.empty()) {
    if (d.has_hdf5_data_param())
      d.mutable_hdf5_data_param()->set_source(data_source);
    else
      d.mutable_data_param()->set_source(data_source);
  }
  d.clear_include();
  d.clear_exclude();
  if (d.top_size() < 2) input_error("{}: the recorded data layer has no label top", source);
  const std::string label = d.top(1);
  while (data.param.layer_size() > 1) data.param.mutable_layer()->RemoveLast();
  proto::NetState st;
  st.set_phase(proto::TEST);
  Graph g = build_caffe_graph(data, st);
  g.name = b.graph.name;
  // The data layer produces what the bundle's inputs gave.
  std::vector<bool> skip(b.graph.nodes.size());
  for (size_t n = 0; n < skip.size(); ++n) skip[n] = op_traits(b.graph.nodes[n]).external_input;
  append_graph(g, b.graph, skip, source);
  const std::string prob = g.values[g.nodes.back().outputs.at(0)].name;
  // Top-1 and top-5 accuracy against the label, as Caffe layers through the front end.
  for (int k : {1, 5}) {
    proto::LayerParameter acc = caffe_accuracy_layer(k == 1 ? "accuracy" : "accuracy_top5", k);
    Node n = caffe_layer_node(acc, "scoring metrics");
    n.inputs = {g.find_value(prob), g.find_value(label)};
    n.propagate_down.assign(2, false);
    n.outputs = {g.add_value(acc.name())};
    g.nodes.push_back(std::move(n));
  }
  relink(g);
  return g;
}

}  // namespace bks
