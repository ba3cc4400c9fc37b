// Pass: bf16 inference. The weighted layers (convolutions, inner products) carry nearly all
// the arithmetic and switch to oneDNN's bf16 kernels. A convolution whose readers all take
// bf16 (bf16 convolutions, through poolings and concats) writes bf16, so nothing converts
// to f32 and back between them; every other value stays f32. (Where the runtime's layout
// plan cannot keep one bf16 after all, its writer converts it to f32.)
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

bool is_bf16_convolution(const Node& n) { return op_traits(n).convolution && n.deploy.precision == Precision::bf16; }

// For every value: whether each of its readers takes it bf16, that is a bf16 convolution
// reading it once as its input or its fused residual, or a pooling or concat whose output
// qualifies in turn. Decided from the last node to the first (readers come after their
// writers), so in one pass over the graph, without recursion, however long a chain of
// poolings a crafted net holds.
std::vector<bool> bf16_values(const Graph& g) {
  const std::vector<bool> own = own_buffer_values(g);
  std::vector<bool> ok(g.values.size(), false);
  auto readers_take_bf16 = [&](int producer, int v) {
    const Value& val = g.values[v];
    if (!own[v]) return false;  // a net output, or a blob rewritten in place: f32
    for (int c : val.consumers) {
      const Node& n = g.nodes[c];
      if (c <= producer || std::count(n.inputs.begin(), n.inputs.end(), v) != 1) return false;
      const bool as_input = n.inputs[0] == v;
      const bool as_residual = n.deploy.fusion.residual_sum && n.inputs.size() == 2 && n.inputs[1] == v;
      if (is_bf16_convolution(n) && (as_input || as_residual)) continue;
      if (op_traits(n).passes_bf16 && n.outputs.size() == 1 && ok[n.outputs[0]]) continue;
      return false;
    }
    return true;
  };
  for (int k = static_cast<int>(g.nodes.size()) - 1; k >= 0; --k)
    for (int v : g.nodes[k].outputs) ok[v] = readers_take_bf16(k, v);
  return ok;
}

}  // namespace

PassReport compute_in_bf16(Graph& g) {
  PassReport r{"compute-in-bf16", {}};
  for (Node& n : g.nodes) {
    if (!op_traits(n).weighted_linear || n.deploy.precision != Precision::fp32) continue;
    n.deploy.precision = Precision::bf16;
    r.changes.push_back(fmt::format("{} '{}'", n.type, n.name));
  }
  const std::vector<bool> bf16 = bf16_values(g);
  int kept = 0;
  for (Node& n : g.nodes) {
    n.deploy.bf16_output = is_bf16_convolution(n) && n.outputs.size() == 1 && bf16[n.outputs[0]];
    kept += n.deploy.bf16_output;
  }
  r.changes.push_back(fmt::format("{} convolution(s) writing bf16 for bf16 readers", kept));
  return r;
}

}  // namespace bks
