#include "ops/shape_inference.h"

#include <fmt/format.h>

#include "core/error.h"

namespace bks {
namespace {

// "1", "at least 1" or "1 to 3" for arity errors.
std::string arity_text(int lo, int hi) {
  if (lo == hi) return fmt::format("{}", lo);
  if (hi < 0) return fmt::format("at least {}", lo);
  return fmt::format("{} to {}", lo, hi);
}

}  // namespace

const OpDef& checked_def(const Graph& g, int n, Phase phase) {
  const OpDef& def = op_def(g, n);
  const Node& node = g.nodes[n];
  OpContext c{node, g.describe(n), phase};
  int ni = static_cast<int>(node.inputs.size()), no = static_cast<int>(node.outputs.size());
  int lo = def.min_inputs(c), hi = def.max_inputs(c);
  if (ni < lo || (hi >= 0 && ni > hi))
    input_error("{}: takes {} bottom blob(s), got {}", c.where, arity_text(lo, hi), ni);
  lo = def.min_outputs(c);
  hi = def.max_outputs(c);
  if (no < lo || (hi >= 0 && no > hi))
    input_error("{}: produces {} top blob(s), got {}", c.where, arity_text(lo, hi), no);
  def.check(c);
  return def;
}

std::vector<Shape> input_shapes(const Graph& g, int n) {
  std::vector<Shape> in;
  for (int v : g.nodes.at(n).inputs) in.push_back(g.values[v].shape);
  return in;
}

std::vector<Shape> output_shapes(const Graph& g, int n) {
  std::vector<Shape> out;
  for (int v : g.nodes.at(n).outputs) out.push_back(g.values[v].shape);
  return out;
}

void infer_node_shapes(Graph& g, int n, Phase phase) {
  const Node& node = g.nodes[n];
  std::vector<Shape> out(node.outputs.size());
  OpContext c{node, g.describe(n), phase};
  op_def(g, n).infer(c, input_shapes(g, n), out);
  // Every later product of these dimensions (kernels, the planner) relies on this bound.
  for (size_t j = 0; j < out.size(); ++j) {
    if (std::string problem = shape_problem(out[j], sizeof(float)); !problem.empty())
      c.fail("top '{}': {}", g.values[node.outputs[j]].name, problem);
    g.values[node.outputs[j]].shape = out[j];
  }
}

void infer_shapes(Graph& g, Phase phase) {
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    checked_def(g, n, phase);
    infer_node_shapes(g, n, phase);
  }
}

}  // namespace bks
