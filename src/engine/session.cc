#include "engine/session.h"

#include <algorithm>

#include "core/error.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"

namespace bks {

InferenceSession::InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch) {
  proto::NetParameter graph = b.net;
  if (batch > 0) set_input_batch(graph, batch);
  bundle_net_ = build_bundle_net(b, graph, source, threads, inference_options(b));
  net_ = bundle_net_->net.get();
  inputs_ = net_->inputs();
  if (inputs_.empty()) input_error("{}: the bundle's graph has no Input layer", source);
  batch_ = net_->graph().values[inputs_[0]].shape.at(0);
}

InferenceSession::~InferenceSession() = default;

NetOptions inference_options(const Bundle& b) {
  NetOptions opt;
  opt.constant_params = true;  // the weights are the bundle's, fixed
  opt.bf16 = bundle_precision(b) == Precision::bf16;
  return opt;
}

Precision bundle_precision(const Bundle& b) {
  auto it = b.info.find("precision");
  return it == b.info.end() ? Precision::fp32 : parse_precision(it->second, "the bundle's precision");
}

std::unique_ptr<BundleNet> build_bundle_net(const Bundle& b, const proto::NetParameter& graph,
                                            const std::string& source, int threads, NetOptions options) {
  NetLoad nl;
  nl.param = graph;
  nl.source = source;
  proto::NetState st;
  st.set_phase(proto::TEST);
  auto r = std::make_unique<BundleNet>();
  r->backend = std::make_unique<CpuBackend>(threads);
  r->net = std::make_unique<Net>(build_caffe_graph(nl, st), proto::TEST, r->store, *r->backend, 1, options);
  // Data fed in another way (a dataset to score on) must have the items the bundle takes;
  // otherwise the first mismatch would surface as a weight of the wrong shape.
  for (const auto& l : b.net.layer()) {
    if (!op_traits(l).external_input) continue;
    for (int t = 0; t < l.top_size() && t < l.input_param().shape_size(); ++t) {
      int v = r->net->graph().find_value(l.top(t));
      if (v < 0) continue;
      const Shape& got = r->net->graph().values[v].shape;
      Shape want(l.input_param().shape(t).dim().begin(), l.input_param().shape(t).dim().end());
      if (got.size() != want.size() || !std::equal(got.begin() + 1, got.end(), want.begin() + 1))
        input_error("{}: the data gives '{}' items of shape {} but the bundle takes {} (batch first)", source, l.top(t),
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

proto::NetParameter scoring_net(const Bundle& b, const std::string& source, const std::string& data_source) {
  auto it = b.info.find("data_layers");
  if (it == b.info.end())
    input_error(
        "{}: the bundle records no data layer (it was deployed from a deploy prototxt); "
        "score it from a train/test prototxt's bundle",
        source);
  proto::NetParameter data;
  parse_prototxt_string(it->second, source + " (recorded data layers)", data);
  if (data.layer_size() == 0) input_error("{}: corrupt bundle: empty data_layers", source);
  proto::NetParameter net;
  net.set_name(b.net.name());
  proto::LayerParameter d = data.layer(0);
  if (!data_source.empty()) {
    if (d.has_hdf5_data_param())
      d.mutable_hdf5_data_param()->set_source(data_source);
    else
      d.mutable_data_param()->set_source(data_source);
  }
  d.clear_include();
  d.clear_exclude();
  if (d.top_size() < 2) input_error("{}: the recorded data layer has no label top", source);
  *net.add_layer() = d;
  std::string prob;
  for (const auto& l : b.net.layer()) {
    if (op_traits(l).external_input) continue;  // the data layer produces these blobs now
    *net.add_layer() = l;
    if (l.top_size() > 0) prob = l.top(0);
  }
  for (int k : {1, 5}) {
    auto* acc = net.add_layer();
    acc->set_name(k == 1 ? "accuracy" : "accuracy_top5");
    acc->set_type("Accuracy");
    acc->add_bottom(prob);
    acc->add_bottom(d.top(1));
    acc->add_top(acc->name());
    acc->mutable_accuracy_param()->set_top_k(k);
  }
  return net;
}

}  // namespace bks
