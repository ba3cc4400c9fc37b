#include "formats/graph_json.h"

#include <google/protobuf/text_format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/prototxt.h"

namespace bks {

using nlohmann::json;

namespace {

json deploy_to_json(const NodeDeploy& d) {
  json j = json::object();
  if (d.fusion.residual_sum) j["fused_residual_sum"] = true;
  if (d.fusion.relu) j["fused_relu_slope"] = d.fusion.relu_slope;
  if (!d.kernel.empty()) j["kernel"] = d.kernel;
  if (d.int8_input_threshold > 0.f) j["int8_input_threshold"] = d.int8_input_threshold;
  if (d.int8_output_threshold > 0.f) j["int8_output_threshold"] = d.int8_output_threshold;
  return j;
}

// The layer's own fields, without what the IR holds itself.
std::string caffe_attrs(const Node& n) {
  proto::LayerParameter l = n.param;
  l.clear_name();
  l.clear_type();
  l.clear_bottom();
  l.clear_top();
  l.clear_loss_weight();
  l.clear_propagate_down();
  l.clear_include();
  l.clear_exclude();
  l.clear_blobs();
  std::string text;
  google::protobuf::TextFormat::PrintToString(l, &text);
  return text;
}

// Reading with every structural error named.
struct Reader {
  const std::string& source;

  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(source + ": corrupt bundle graph: " + fmt::format(f, std::forward<A>(a)...));
  }
  const json& member(const json& o, const char* key, json::value_t type, const std::string& what) const {
    if (!o.is_object()) fail("{} is not an object", what);
    auto it = o.find(key);
    if (it == o.end()) fail("{} has no '{}'", what, key);
    bool ok = it->type() == type || (type == json::value_t::number_float && it->is_number()) ||
              (type == json::value_t::number_integer && it->is_number_integer());
    if (!ok) fail("{}: '{}' has the wrong type ({})", what, key, it->type_name());
    return *it;
  }
  float number(const json& o, const char* key, const std::string& what) const {
    auto it = o.find(key);
    if (it == o.end()) return 0.f;
    if (!it->is_number()) fail("{}: '{}' is not a number", what, key);
    return it->get<float>();
  }
  std::vector<int> indices(const json& a, size_t limit, const std::string& what) const {
    std::vector<int> out;
    for (const json& i : a) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= static_cast<int64_t>(limit))
        fail("{}: value index {} is not one of the {} values", what, i.dump(), limit);
      out.push_back(i.get<int>());
    }
    return out;
  }
};

NodeDeploy deploy_from_json(const Reader& r, const json& j, const std::string& what) {
  NodeDeploy d;
  if (!j.is_object()) r.fail("{}: 'deploy' is not an object", what);
  if (j.contains("fused_residual_sum")) {
    if (!j["fused_residual_sum"].is_boolean()) r.fail("{}: 'fused_residual_sum' is not true or false", what);
    d.fusion.residual_sum = j["fused_residual_sum"].get<bool>();
  }
  if (j.contains("fused_relu_slope")) {
    d.fusion.relu = true;
    d.fusion.relu_slope = r.number(j, "fused_relu_slope", what);
  }
  if (j.contains("kernel")) {
    if (!j["kernel"].is_string()) r.fail("{}: 'kernel' is not a string", what);
    d.kernel = j["kernel"].get<std::string>();
  }
  d.int8_input_threshold = r.number(j, "int8_input_threshold", what);
  d.int8_output_threshold = r.number(j, "int8_output_threshold", what);
  return d;
}

}  // namespace

std::string graph_to_json(const Graph& g) {
  json values = json::array();
  for (const Value& v : g.values) values.push_back(v.name);
  json nodes = json::array();
  for (const Node& n : g.nodes) {
    json o = {{"name", n.name}, {"type", n.type}, {"inputs", n.inputs}, {"outputs", n.outputs}};
    if (!n.loss_weight.empty()) o["loss_weight"] = n.loss_weight;
    json d = deploy_to_json(n.deploy);
    if (!d.empty()) o["deploy"] = d;
    o["caffe_attrs"] = caffe_attrs(n);
    nodes.push_back(std::move(o));
  }
  return json{{"name", g.name}, {"values", values}, {"nodes", nodes}}.dump();
}

Graph graph_from_json(const std::string& text, const std::string& source) {
  Reader r{source};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    r.fail("not JSON ({})", e.what());
  }
  Graph g;
  g.source = source;
  g.name = r.member(j, "name", json::value_t::string, "the graph").get<std::string>();
  for (const json& v : r.member(j, "values", json::value_t::array, "the graph")) {
    if (!v.is_string()) r.fail("a value name is not a string");
    g.add_value(v.get<std::string>());
  }
  const json& nodes = r.member(j, "nodes", json::value_t::array, "the graph");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& o = nodes[i];
    std::string what = fmt::format("node {}", i);
    Node n;
    n.name = r.member(o, "name", json::value_t::string, what).get<std::string>();
    what = fmt::format("node {} '{}'", i, n.name);
    n.type = r.member(o, "type", json::value_t::string, what).get<std::string>();
    n.where = fmt::format("{}: layer '{}'", source, n.name);
    n.inputs = r.indices(r.member(o, "inputs", json::value_t::array, what), g.values.size(), what);
    n.outputs = r.indices(r.member(o, "outputs", json::value_t::array, what), g.values.size(), what);
    if (o.contains("loss_weight")) {
      for (const json& w : r.member(o, "loss_weight", json::value_t::array, what)) {
        if (!w.is_number()) r.fail("{}: a loss_weight is not a number", what);
        n.loss_weight.push_back(w.get<float>());
      }
    }
    if (o.contains("deploy")) n.deploy = deploy_from_json(r, o["deploy"], what);
    parse_prototxt_string(r.member(o, "caffe_attrs", json::value_t::string, what).get<std::string>(),
                          source + " (" + what + ")", n.param);
    n.param.set_name(n.name);
    n.param.set_type(n.type);
    n.propagate_down.assign(n.inputs.size(), true);
    g.nodes.push_back(std::move(n));
  }
  // Producers and consumers, with each value written once and read only after that.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (int v : n.inputs) {
      if (g.values[v].producer < 0 || g.values[v].producer >= static_cast<int>(i))
        r.fail("node '{}' reads value '{}' before any node writes it", n.name, g.values[v].name);
      g.values[v].consumers.push_back(static_cast<int>(i));
    }
    for (int v : n.outputs) {
      if (g.values[v].producer >= 0) r.fail("value '{}' is written twice", g.values[v].name);
      g.values[v].producer = static_cast<int>(i);
    }
  }
  if (g.nodes.empty()) r.fail("no nodes");
  return g;
}

}  // namespace bks
