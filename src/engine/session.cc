#include "engine/session.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "profile/profiler.h"

namespace bks {

InferenceSession::InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch) {
  Graph graph = b.graph;
  if (batch > 0) set_input_batch(graph, batch);
  bundle_net_ = build_bundle_net(b, graph, source, threads, inference_options(b));
  net_ = bundle_net_->net.get();
  inputs_ = net_->inputs();
  if (inputs_.empty()) input_error("{}: the bundle's graph has no Input layer", source);
  batch_ = net_->graph().values[inputs_[0]].shape.at(0);
}

InferenceSession::~InferenceSession() = default;

void fill_inputs_uniform(InferenceSession& s, uint64_t seed) {
  Rng rng(seed);
  for (int v : s.inputs()) {
    Tensor& t = s.value(v);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(0.f, 1.f);
  }
}

std::vector<double> time_nodes(InferenceSession& s, int iterations) {
  Net& net = s.net();
  s.run();
  Profiler prof;
  prof.resize(net.num_nodes());
  net.set_profiler(&prof);
  for (int i = 0; i < iterations; ++i) s.run();
  net.set_profiler(nullptr);
  std::vector<double> ms(static_cast<size_t>(net.num_nodes()));
  for (int k = 0; k < net.num_nodes(); ++k)
    ms[static_cast<size_t>(k)] = prof.total_ms(k, Profiler::Pass::forward) / std::max(iterations, 1);
  return ms;
}

NetOptions inference_options(const Bundle& b) {
  NetOptions opt;
  opt.constant_params = true;  // the weights are the bundle's, fixed
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
    std::vector<Shape> takes(n.outputs.size());
    op_def(b.graph, k).infer(OpContext{n, b.graph.describe(k), proto::TEST}, {}, takes);
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
