#include "engine/deploy.h"

#include <google/protobuf/text_format.h>

#include "core/error.h"
#include "core/sysinfo.h"
#include "formats/caffe_net.h"
#include "formats/weights.h"
#include "runtime/net.h"

namespace bks {

void require_bf16() {
  SysInfo si = query_sysinfo();
  if (!si.has("avx512_bf16") && !si.has("amx_bf16"))
    input_error("--precision bf16: this CPU ({}) has neither AVX-512 BF16 nor AMX-BF16 instructions", si.cpu_model);
}

DeployModel load_deploy_model(const DeployOptions& o) {
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "int8")
    input_error("--precision must be fp32, bf16 or int8, got '{}'", o.precision);
  if (o.precision == "bf16") require_bf16();
  NetLoad nl = load_net_file(o.model);
  proto::NetState st = nl.param.state();
  st.set_phase(proto::TEST);
  CpuBackend backend(o.threads);
  ParamStore store;
  NetOptions opt;
  opt.reuse_buffers = true;
  // Builds the net only to infer shapes and bind each layer's blobs (sharing resolved).
  Net net(build_caffe_graph(nl, st), proto::TEST, store, backend, 1, opt);
  if (!store.all().empty() && load_weights(o.weights, store) == 0)
    input_error("{}: none of the net's parameter blobs are in this file", o.weights);
  DeployModel m;
  m.graph = net.graph();
  for (int n = 0; n < net.num_nodes(); ++n)
    for (size_t i = 0; i < m.graph.nodes[n].params.size(); ++i)
      m.weights[m.graph.nodes[n].params[i].key] = store.at(net.param_index(n, static_cast<int>(i))).data.clone();
  return m;
}

void set_input_batch(DeployModel& m, int64_t batch) {
  for (Node& node : m.graph.nodes) {
    if (node.type != "Input") continue;
    for (auto& s : *node.param.mutable_input_param()->mutable_shape())
      if (s.dim_size() > 0) s.set_dim(0, batch);
    for (int v : node.outputs)
      if (!m.graph.values[v].shape.empty()) m.graph.values[v].shape[0] = batch;
  }
}

DeployResult deploy(const DeployOptions& o, const std::function<void(const PassReport&, const DeployModel&)>& after_each) {
  DeployModel m = load_deploy_model(o);
  if (after_each) after_each(PassReport{"input", {}}, m);
  DeployResult r;
  r.reports = run_deploy_passes(m, after_each);
  if (o.batch > 0) set_input_batch(m, o.batch);
  r.bundle.net = to_net_parameter(m);
  r.bundle.weights = weights_by_layer(m);
  r.bundle.info["precision"] = o.precision;
  r.bundle.info["source_model"] = o.model;
  r.bundle.info["source_weights"] = o.weights;
  std::string passes;
  for (const auto& rep : r.reports)
    for (const auto& c : rep.changes) passes += rep.pass + ": " + c + "\n";
  r.bundle.info["passes"] = passes;
  // The TEST data layers, so `bakusoku test` can score the bundle on the same data.
  NetLoad nl = load_net_file(o.model);
  proto::NetState st = nl.param.state();
  st.set_phase(proto::TEST);
  std::string data;
  for (const auto& l : nl.param.layer())
    if ((l.type() == "Data" || l.type() == "HDF5Data") && layer_included(l, st)) {
      std::string t;
      google::protobuf::TextFormat::PrintToString(l, &t);
      data += "layer {\n" + t + "}\n";
    }
  if (!data.empty()) r.bundle.info["data_layers"] = data;
  return r;
}

}  // namespace bks
