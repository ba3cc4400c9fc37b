// Passes: Binarize before the inner Convolution / InnerProduct layers (train --qat xnor and
// its deployment), and those layers onto the XNOR kernels (see insert_binarize.h).
#include "passes/insert_binarize.h"

#include <fmt/format.h>

#include <cmath>

#include "graph/graph_edit.h"
#include "ops/conv_attrs.h"
#include "ops/op_def.h"
#include "passes/insert_before_readers.h"

namespace bks {
namespace {

constexpr const char kSuffix[] = "/binarize";

// Whether every output channel of `w` (axis 0, or the last axis when output_last) holds
// +-one magnitude: the binary grid, BatchNorm folded in or not.
bool binary_per_channel(const Tensor& w, bool output_last) {
  const Shape& s = w.shape();
  if (s.empty()) return false;
  const int64_t channels = output_last ? s.back() : s[0], per = w.numel() / std::max<int64_t>(channels, 1);
  const float* x = w.f32();
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t first = output_last ? c : c * per, step = output_last ? channels : 1;
    const float a = std::fabs(x[first]);
    for (int64_t i = 1; i < per; ++i)
      if (std::fabs(std::fabs(x[first + i * step]) - a) > 1e-6f * a) return false;
  }
  return true;
}

}  // namespace

PassReport insert_binarize(Graph& g) {
  PassReport r{"insert-binarize", {}};
  std::vector<int> linear;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
    if (op_traits(g.nodes[n]).weighted_linear && !g.nodes[n].inputs.empty()) linear.push_back(n);
  if (linear.size() < 3) return r;  // nothing between the first and the last
  std::vector<bool> binarized(g.nodes.size(), false);
  for (size_t i = 1; i + 1 < linear.size(); ++i) binarized[linear[i]] = true;
  insert_before_readers(g, binarized, "Binarize", kSuffix, [&](const Node& reader, const std::string& value, bool) {
    r.changes.push_back(fmt::format("{} '{}' reads the signs of '{}'", reader.type, reader.name, value));
  });
  verify_graph(g, r.pass);
  return r;
}

PassReport binarize_layers(DeployModel& m) {
  PassReport r{"binarize-layers", {}};
  Graph& g = m.graph;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    const bool conv = node.type == "Convolution", ip = node.type == "InnerProduct";
    if (!(conv || ip) || node.inputs.empty() || node.params.empty()) continue;
    const int src = g.values[node.inputs[0]].producer;
    if (src < 0 || g.nodes[src].type != "Binarize") continue;
    if (conv && node.attrs.as<ConvAttrs>().group != 1) continue;
    const FusedPostOps& f = node.deploy.fusion;
    if (f.residual_sum || f.bounded() || node.deploy.precision != Precision::fp32) continue;
    const OpDef& def = op_def(g, n);
    if (!binary_per_channel(m.blob(n, 0), def.weights_output_last(node))) {
      r.changes.push_back(fmt::format("{} '{}' kept: its weights are not binary", node.type, node.name));
      continue;
    }
    node.inputs[0] = g.nodes[src].inputs[0];
    node.type = conv ? "BinaryConvolution" : "BinaryInnerProduct";
    r.changes.push_back(
        fmt::format("'{}' runs XNOR + popcount on the signs of '{}'", node.name, g.values[node.inputs[0]].name));
  }
  relink(g);
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
    dead[n] = g.nodes[n].type == "Binarize" && g.values[g.nodes[n].outputs[0]].consumers.empty();
  erase_nodes(g, dead);
  verify_graph(g, r.pass);
  return r;
}

}  // namespace bks
