#include "engine/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/precision.h"
#include "ops/op_def.h"

namespace bks {

namespace {

constexpr int64_t kFewChannelsForInt8 = 4;

bool is_int8_node(const Node& n) { return op_traits(n).weighted_linear && n.deploy.int8_input_threshold > 0.f; }

// The threshold every reader of value v quantizes it with, when all of them are int8 nodes
// (or MAX poolings whose outputs qualify in turn) and agree; none otherwise.
std::optional<float> int8_readers_threshold(const Graph& g, int v) {
  const Value& val = g.values[v];
  // An output of the net, or a blob rewritten in place (the buffer may be shared): f32.
  if (val.consumers.empty() || val.producer < 0) return std::nullopt;
  for (size_t u = 0; u < g.values.size(); ++u)
    if (static_cast<int>(u) != v && g.values[u].name == val.name) return std::nullopt;
  std::optional<float> t;
  for (int c : val.consumers) {
    const Node& n = g.nodes[c];
    std::optional<float> mine;
    if (is_int8_node(n) && n.inputs[0] == v && std::count(n.inputs.begin(), n.inputs.end(), v) == 1) {
      mine = n.deploy.int8_input_threshold;
    } else if (op_traits(n).max_pooling && n.outputs.size() == 1) {
      mine = int8_readers_threshold(g, n.outputs[0]);
    }
    if (!mine || (t && *t != *mine)) return std::nullopt;
    t = mine;
  }
  return t;
}

}  // namespace

int keep_int8_between_layers(Graph& g) {
  int count = 0;
  for (Node& n : g.nodes) {
    n.deploy.int8_output_threshold = 0.f;
    // A fused residual sum adds f32 values; such a node writes f32.
    if (!is_int8_node(n) || n.outputs.size() != 1 || n.deploy.fusion.residual_sum) continue;
    if (auto t = int8_readers_threshold(g, n.outputs[0])) {
      n.deploy.int8_output_threshold = *t;
      ++count;
    }
  }
  return count;
}

std::vector<std::string> keep_int8_where_faster(Graph& g, const std::vector<double>& fp32_ms,
                                                const std::vector<double>& int8_ms, Int8Plan& plan) {
  std::vector<std::string> sent_back;
  for (size_t k = 0; k < g.nodes.size() && k < fp32_ms.size() && k < int8_ms.size(); ++k) {
    Node& n = g.nodes[k];
    if (!is_int8_node(n) || !(int8_ms[k] > 1.05 * fp32_ms[k])) continue;
    n.deploy.int8_input_threshold = 0.f;
    n.deploy.precision = Precision::fp32;
    --plan.quantized;
    sent_back.push_back(fmt::format("{}: fp32 {:.4f} ms, faster than int8 {:.4f} ms", n.name, fp32_ms[k], int8_ms[k]));
  }
  plan.int8_outputs = keep_int8_between_layers(g);
  return sent_back;
}

Int8Plan quantize_int8(Bundle& b, const CalibrationTable& t, const std::map<std::string, Shape>& shapes) {
  Int8Plan plan;
  Graph& g = b.graph;
  for (Node& n : g.nodes) {
    const OpTraits tr = op_traits(n);
    if (!tr.weighted_linear || n.inputs.empty()) continue;
    const std::string& in = g.values[n.inputs[0]].name;
    // First layers (a grey or RGB image): oneDNN 2.6's int8 kernels there are slower than
    // its f32 one (LeNet conv1, batch 256: 1.1-1.8 ms vs 0.77 ms on AVX-512 VNNI).
    auto s = shapes.find(in);
    if (tr.convolution && s != shapes.end() && s->second.size() == 4 && s->second[1] < kFewChannelsForInt8) continue;
    auto it = t.threshold.find(in);
    if (it == t.threshold.end() || it->second <= 0) continue;
    n.deploy.int8_input_threshold = static_cast<float>(it->second);
    n.deploy.precision = Precision::int8;
    ++plan.quantized;
  }
  plan.int8_outputs = keep_int8_between_layers(g);
  b.info["precision"] = precision_name(Precision::int8);
  return plan;
}

}  // namespace bks
