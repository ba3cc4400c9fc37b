#include "engine/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph_edit.h"
#include "graph/precision.h"
#include "ops/op_def.h"

namespace bks {

namespace {

bool is_int8_node(const Node& n) { return op_traits(n).weighted_linear && n.deploy.int8_input_threshold > 0.f; }

// Whether node n is an int8 node reading value v as its fused residual only: it takes v
// int8 at any threshold (its kernel rescales it into its output's units).
bool reads_int8_residual(const Node& n, int v) {
  return is_int8_node(n) && n.deploy.fusion.residual_sum && n.inputs.size() == 2 && n.inputs[1] == v &&
         n.inputs[0] != v;
}

// For every value: the threshold all its readers quantize it with, when all of them are
// int8 nodes (or MAX poolings whose outputs qualify in turn, or average poolings, which
// take the value's calibrated range) and agree; none otherwise.
// Readers of a value as a fused residual agree with any threshold; when they are the only
// readers, the value's calibrated range is used (none when it was not measured). Decided
// from the last node to the first (readers come after their writers), so in one pass
// without recursion, however long a chain of poolings a crafted net holds.
std::vector<std::optional<float>> int8_reader_thresholds(const Graph& g,
                                                         const std::map<std::string, float>& calibrated) {
  const std::vector<bool> own = own_buffer_values(g);
  std::vector<std::optional<float>> out(g.values.size());
  auto calibrated_threshold = [&](const std::string& name) -> std::optional<float> {
    auto it = calibrated.find(name);
    if (it != calibrated.end() && it->second > 0.f) return it->second;
    return std::nullopt;
  };
  auto readers_threshold = [&](int producer, int v) -> std::optional<float> {
    const Value& val = g.values[v];
    if (!own[v]) return std::nullopt;  // a net output, or a blob rewritten in place: f32
    std::optional<float> t;
    for (int c : val.consumers) {
      const Node& n = g.nodes[c];
      if (c <= producer) return std::nullopt;
      if (reads_int8_residual(n, v)) continue;
      std::optional<float> mine;
      if (is_int8_node(n) && n.inputs[0] == v && std::count(n.inputs.begin(), n.inputs.end(), v) == 1) {
        mine = n.deploy.int8_input_threshold;
      } else if (op_traits(n).max_pooling && n.outputs.size() == 1) {
        mine = out[n.outputs[0]];
      } else if (op_traits(n).averages_int8 && n.inputs.size() == 1) {
        mine = calibrated_threshold(val.name);  // it dequantizes with whatever it is given
      }
      if (!mine || (t && *t != *mine)) return std::nullopt;
      t = mine;
    }
    return t ? t : calibrated_threshold(val.name);
  };
  for (int k = static_cast<int>(g.nodes.size()) - 1; k >= 0; --k)
    for (int v : g.nodes[k].outputs) out[v] = readers_threshold(k, v);
  return out;
}

// For every value: the threshold it is written int8 with (through MAX poolings, which keep
// it), or 0 when it is f32. In one pass from the first node to the last.
std::vector<float> int8_written_thresholds(const Graph& g) {
  std::vector<float> out(g.values.size(), 0.f);
  for (const Node& n : g.nodes) {
    float t = is_int8_node(n) ? n.deploy.int8_output_threshold : 0.f;
    if (op_traits(n).max_pooling && !n.inputs.empty()) t = out[n.inputs[0]];
    for (int v : n.outputs) out[v] = t;
  }
  return out;
}

}  // namespace

int keep_int8_between_layers(Graph& g, const std::map<std::string, float>& calibrated) {
  for (Node& n : g.nodes) n.deploy.int8_output_threshold = 0.f;
  const std::vector<std::optional<float>> readers = int8_reader_thresholds(g, calibrated);
  int count = 0;
  for (Node& n : g.nodes) {
    if (!is_int8_node(n) || n.outputs.size() != 1 || !readers[n.outputs[0]]) continue;
    n.deploy.int8_output_threshold = *readers[n.outputs[0]];
    ++count;
  }
  // A fused residual written int8 arrives int8: its reader needs the writer's threshold; so
  // does an average pooling reading an int8 value.
  const std::vector<float> written = int8_written_thresholds(g);
  for (Node& n : g.nodes) {
    n.deploy.int8_residual_threshold = 0.f;
    if (is_int8_node(n) && n.deploy.fusion.residual_sum && n.inputs.size() == 2)
      n.deploy.int8_residual_threshold = written[n.inputs[1]];
    if (op_traits(n).averages_int8 && n.inputs.size() == 1) n.deploy.int8_input_threshold = written[n.inputs[0]];
  }
  return count;
}

std::vector<std::string> keep_int8_where_faster(Graph& g, const std::vector<double>& fp32_ms,
                                                const std::vector<double>& int8_ms, Int8Plan& plan) {
  std::vector<std::string> sent_back;
  for (size_t k = 0; k < g.nodes.size() && k < fp32_ms.size() && k < int8_ms.size(); ++k) {
    Node& n = g.nodes[k];
    if (!is_int8_node(n)) continue;
    plan.timed += fp32_ms[k] > 0.0 && int8_ms[k] > 0.0;
    if (!(int8_ms[k] > 1.05 * fp32_ms[k])) continue;
    n.deploy.int8_input_threshold = 0.f;
    n.deploy.precision = Precision::fp32;
    --plan.quantized;
    sent_back.push_back(fmt::format("{}: fp32 {:.4f} ms, faster than int8 {:.4f} ms", n.name, fp32_ms[k], int8_ms[k]));
  }
  plan.int8_outputs = keep_int8_between_layers(g, plan.calibrated);
  return sent_back;
}

Int8Plan quantize_int8(Bundle& b, const CalibrationTable& t) {
  Int8Plan plan;
  for (const auto& [blob, th] : t.threshold) plan.calibrated[blob] = static_cast<float>(th);
  Graph& g = b.graph;
  for (Node& n : g.nodes) {
    const OpTraits tr = op_traits(n);
    if (!tr.weighted_linear || n.inputs.empty()) continue;
    const std::string& in = g.values[n.inputs[0]].name;
    auto it = t.threshold.find(in);
    if (it == t.threshold.end() || it->second <= 0) continue;
    n.deploy.int8_input_threshold = static_cast<float>(it->second);
    n.deploy.precision = Precision::int8;
    ++plan.quantized;
  }
  plan.int8_outputs = keep_int8_between_layers(g, plan.calibrated);
  b.info["precision"] = precision_name(Precision::int8);
  return plan;
}

}  // namespace bks
