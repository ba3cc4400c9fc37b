#include "formats/graph_json.h"

#include <nlohmann/json.hpp>

#include <functional>

#include "core/error.h"

namespace bks {

using nlohmann::json;

namespace {

// Whether j is of `type`, an integer counting as a number (JSON writes 1.0 as 1).
bool has_type(const json& j, json::value_t type) {
  return j.type() == type || (type == json::value_t::number_float && j.is_number()) ||
         (type == json::value_t::number_integer && j.is_number_integer());
}

json deploy_to_json(const NodeDeploy& d) {
  json j = json::object();
  if (d.precision != Precision::fp32) j["precision"] = precision_name(d.precision);
  if (d.fusion.residual_sum) j["fused_residual_sum"] = true;
  if (d.fusion.relu) j["fused_relu_slope"] = d.fusion.relu_slope;
  if (d.fusion.bounded()) j["fused_relu_max"] = d.fusion.relu_max;
  if (!d.kernel.empty()) j["kernel"] = d.kernel;
  if (d.int8_input_threshold > 0.f) j["int8_input_threshold"] = d.int8_input_threshold;
  if (d.int8_output_threshold > 0.f) j["int8_output_threshold"] = d.int8_output_threshold;
  if (d.int8_residual_threshold > 0.f) j["int8_residual_threshold"] = d.int8_residual_threshold;
  if (d.bf16_output) j["bf16_output"] = true;
  return j;
}

// Attributes as a JSON object, field by field.
class JsonWriter final : public AttrVisitor {
 public:
  json out = json::object();
  void field(const char* n, bool& v) override { out[n] = v; }
  void field(const char* n, int64_t& v) override { out[n] = v; }
  void field(const char* n, float& v) override { out[n] = v; }
  void field(const char* n, std::string& v) override { out[n] = v; }
  void field(const char* n, std::vector<int64_t>& v) override { out[n] = v; }
  void field(const char* n, std::vector<float>& v) override { out[n] = v; }
  void field(const char* n, std::vector<std::string>& v) override { out[n] = v; }
  void field(const char* n, AttrStruct& v) override {
    JsonWriter w;
    visit_const(v, w);
    out[n] = std::move(w.out);
  }
  void field(const char* n, int& v, std::span<const char* const> names) override {
    out[n] = v >= 0 && v < static_cast<int>(names.size()) ? json(names[v]) : json(v);
  }
};

// Reads the fields a JSON object has (others keep their defaults); a field of the wrong
// type or an unknown enumeration name is an error naming it.
class JsonReader final : public AttrVisitor {
 public:
  JsonReader(const json& in, std::function<void(const std::string&)> fail) : in_(in), fail_(std::move(fail)) {}
  void field(const char* n, bool& v) override {
    if (const json* j = find(n, json::value_t::boolean, "true or false")) v = j->get<bool>();
  }
  void field(const char* n, int64_t& v) override {
    if (const json* j = find(n, json::value_t::number_integer, "an integer")) v = j->get<int64_t>();
  }
  void field(const char* n, float& v) override {
    if (const json* j = find(n, json::value_t::number_float, "a number")) v = j->get<float>();
  }
  void field(const char* n, std::string& v) override {
    if (const json* j = find(n, json::value_t::string, "a string")) v = j->get<std::string>();
  }
  void field(const char* n, std::vector<int64_t>& v) override {
    if (const json* j = find(n, json::value_t::array, "a list")) {
      v.clear();
      for (const json& e : *j) {
        if (!e.is_number_integer()) fail_(fmt::format("attribute '{}' holds a non-integer", n));
        v.push_back(e.get<int64_t>());
      }
    }
  }
  void field(const char* n, std::vector<float>& v) override {
    if (const json* j = find(n, json::value_t::array, "a list")) {
      v.clear();
      for (const json& e : *j) {
        if (!e.is_number()) fail_(fmt::format("attribute '{}' holds a non-number", n));
        v.push_back(e.get<float>());
      }
    }
  }
  void field(const char* n, std::vector<std::string>& v) override {
    if (const json* j = find(n, json::value_t::array, "a list")) {
      v.clear();
      for (const json& e : *j) {
        if (!e.is_string()) fail_(fmt::format("attribute '{}' holds a non-string", n));
        v.push_back(e.get<std::string>());
      }
    }
  }
  void field(const char* n, AttrStruct& v) override {
    if (const json* j = find(n, json::value_t::object, "an object")) {
      JsonReader r(*j, fail_);
      v.visit(r);
    }
  }
  void field(const char* n, int& v, std::span<const char* const> names) override {
    if (const json* j = find(n, json::value_t::string, "a name")) {
      std::string s = j->get<std::string>();
      for (size_t i = 0; i < names.size(); ++i)
        if (s == names[i]) {
          v = static_cast<int>(i);
          return;
        }
      fail_(fmt::format("attribute '{}': '{}' is not one of its values", n, s));
    }
  }

 private:
  const json* find(const char* n, json::value_t type, const char* what) {
    auto it = in_.find(n);
    if (it == in_.end()) return nullptr;
    if (!has_type(*it, type)) fail_(fmt::format("attribute '{}' is not {}", n, what));
    return &*it;
  }
  const json& in_;
  std::function<void(const std::string&)> fail_;
};

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
    if (!has_type(*it, type)) fail("{}: '{}' has the wrong type ({})", what, key, it->type_name());
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
        // Only a number is printed: nlohmann's dump recurses, and a crafted entry may be
        // an array nested a million deep.
        fail("{}: value index {} is not one of the {} values", what,
             i.is_number() ? i.dump() : std::string(i.type_name()), limit);
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
  if (j.contains("fused_relu_max")) {
    if (!d.fusion.relu) r.fail("{}: 'fused_relu_max' needs 'fused_relu_slope'", what);
    d.fusion.relu_max = r.number(j, "fused_relu_max", what);
    if (!(d.fusion.relu_max >= 0.f)) r.fail("{}: 'fused_relu_max' must be a non-negative number", what);
  }
  if (j.contains("precision")) {
    if (!j["precision"].is_string()) r.fail("{}: 'precision' is not a string", what);
    try {
      d.precision = parse_precision(j["precision"].get<std::string>(), "'precision'");
    } catch (const InputError& e) {
      r.fail("{}: {}", what, e.what());
    }
  }
  if (j.contains("kernel")) {
    if (!j["kernel"].is_string()) r.fail("{}: 'kernel' is not a string", what);
    d.kernel = j["kernel"].get<std::string>();
  }
  d.int8_input_threshold = r.number(j, "int8_input_threshold", what);
  d.int8_output_threshold = r.number(j, "int8_output_threshold", what);
  d.int8_residual_threshold = r.number(j, "int8_residual_threshold", what);
  if (j.contains("bf16_output")) {
    if (!j["bf16_output"].is_boolean()) r.fail("{}: 'bf16_output' is not true or false", what);
    d.bf16_output = j["bf16_output"].get<bool>();
  }
  return d;
}

}  // namespace

json attrs_to_json(const Node& n) {
  JsonWriter w;
  if (n.attrs) visit_const(*n.attrs.get(), w);
  return std::move(w.out);
}

std::string graph_to_json(const Graph& g) {
  json values = json::array();
  for (const Value& v : g.values) values.push_back(v.name);
  json nodes = json::array();
  for (const Node& n : g.nodes) {
    json o = {{"name", n.name}, {"type", n.type}, {"inputs", n.inputs}, {"outputs", n.outputs}};
    if (!n.loss_weight.empty()) o["loss_weight"] = n.loss_weight;
    json d = deploy_to_json(n.deploy);
    if (!d.empty()) o["deploy"] = d;
    if (n.attrs) o["attrs"] = attrs_to_json(n);
    if (!n.param_specs.empty()) {
      json specs = json::array();
      for (const ParamSpec& s : n.param_specs)
        specs.push_back({{"share_name", s.share_name}, {"lr_mult", s.lr_mult}, {"decay_mult", s.decay_mult}});
      o["param_specs"] = specs;
    }
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
    n.where = source;  // Graph::describe adds the layer's name and type
    n.inputs = r.indices(r.member(o, "inputs", json::value_t::array, what), g.values.size(), what);
    n.outputs = r.indices(r.member(o, "outputs", json::value_t::array, what), g.values.size(), what);
    if (o.contains("loss_weight")) {
      for (const json& w : r.member(o, "loss_weight", json::value_t::array, what)) {
        if (!w.is_number()) r.fail("{}: a loss_weight is not a number", what);
        n.loss_weight.push_back(w.get<float>());
      }
    }
    if (o.contains("deploy")) n.deploy = deploy_from_json(r, o["deploy"], what);
    if (o.contains("attrs")) {
      const AttrsKind* kind = find_attrs(n.type);
      if (!kind) r.fail("{}: op type '{}' has no attributes here", what, n.type);
      n.attrs = Attrs(kind->make());
      JsonReader reader(r.member(o, "attrs", json::value_t::object, what),
                        [&](const std::string& m) { r.fail("{}: {}", what, m); });
      n.attrs.get()->visit(reader);
    } else {
      n.attrs = default_attrs(n.type);
    }
    if (o.contains("param_specs")) {
      for (const json& s : r.member(o, "param_specs", json::value_t::array, what)) {
        if (!s.is_object()) r.fail("{}: a param spec is not an object", what);
        ParamSpec p;
        if (s.contains("share_name") && s["share_name"].is_string()) p.share_name = s["share_name"].get<std::string>();
        p.lr_mult = r.number(s, "lr_mult", what);
        p.decay_mult = r.number(s, "decay_mult", what);
        n.param_specs.push_back(p);
      }
    }
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
