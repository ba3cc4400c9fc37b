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

namespace {

DeployModel load_deploy_model(const DeployOptions& o, const NetLoad& nl) {
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "int8")
    input_error("--precision must be fp32, bf16 or int8, got '{}'", o.precision);
  if (o.precision == "bf16") require_bf16();
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

// The TEST data layers as prototxt text, so `bakusoku test` can score a bundle on them.
std::string test_data_layers(const NetLoad& nl) {
  proto::NetState st = nl.param.state();
  st.set_phase(proto::TEST);
  std::string data;
  for (const auto& l : nl.param.layer())
    if ((l.type() == "Data" || l.type() == "HDF5Data") && layer_included(l, st)) {
      std::string t;
      google::protobuf::TextFormat::PrintToString(l, &t);
      data += "layer {\n" + t + "}\n";
    }
  return data;
}

}  // namespace

DeployModel load_deploy_model(const DeployOptions& o) { return load_deploy_model(o, load_net_file(o.model)); }

DeployResult deploy(const DeployOptions& o, const std::function<void(const PassReport&, const DeployModel&)>& after_each) {
  NetLoad nl = load_net_file(o.model);
  DeployModel m = load_deploy_model(o, nl);
  if (after_each) after_each(PassReport{"input", {}}, m);
  DeployResult r;
  r.reports = run_deploy_passes(m, after_each);
  r.bundle.net = to_net_parameter(m);
  if (o.batch > 0) set_input_batch(r.bundle.net, o.batch);
  r.bundle.weights = weights_by_layer(m);
  for (const Value& v : m.graph.values) r.shapes[v.name] = v.shape;
  r.bundle.info["precision"] = o.precision;
  r.bundle.info["source_model"] = o.model;
  r.bundle.info["source_weights"] = o.weights;
  std::string passes;
  for (const auto& rep : r.reports)
    for (const auto& c : rep.changes) passes += rep.pass + ": " + c + "\n";
  r.bundle.info["passes"] = passes;
  std::string data = test_data_layers(nl);
  if (!data.empty()) r.bundle.info["data_layers"] = data;
  return r;
}

}  // namespace bks
