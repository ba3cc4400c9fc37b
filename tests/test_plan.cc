// The planner on its own: hand-written graphs and op facts in, a Plan out, no ops or
// kernels built. Gradient flow, summed gradients at a fork, in-place and view aliases, a
// Concat written in place, memory reuse, and check_plan() catching each broken invariant.
#include <gtest/gtest.h>

#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "graph/graph_edit.h"
#include "runtime/plan.h"

namespace bks {
namespace {

// The graph of a prototxt (topology only), every value given `shape`.
Graph graph_of(const std::string& text, const Shape& shape, Phase phase = proto::TRAIN) {
  NetLoad nl;
  nl.source = "plan.prototxt";
  parse_prototxt_string(text, nl.source, nl.param, &nl.layer_lines);
  proto::NetState st;
  st.set_phase(phase);
  Graph g = build_caffe_graph(nl, st);
  for (Value& v : g.values) v.shape = shape;
  return g;
}

OpFacts input_facts() {
  OpFacts f;
  f.has_backward = false;
  f.external_input = true;
  return f;
}
OpFacts weighted_facts() {  // a convolution or inner product with learnable weights
  OpFacts f;
  f.learnable = true;
  return f;
}
OpFacts relu_facts() {  // reads only its output in backward: may run in place
  OpFacts f;
  f.allows_inplace = true;
  f.backward_reads_input = false;
  f.backward_reads_output = true;
  return f;
}
OpFacts loss_facts() {
  OpFacts f;
  f.default_loss_weight = 1.f;
  return f;
}

PreferredLayout plain() {
  return [](int, int, const std::vector<dnnl::memory::desc>&) { return dnnl::memory::desc(); };
}

// x -> conv -> relu (in place) -> {ip_a, ip_b} -> sum -> loss
const char* kFork = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" }
layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
layer { name: "ip_a" type: "InnerProduct" bottom: "c" top: "a" }
layer { name: "ip_b" type: "InnerProduct" bottom: "c" top: "b" }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "s" }
layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "x" top: "loss" }
)";

std::vector<OpFacts> fork_facts() {
  OpFacts loss = loss_facts();
  loss.can_propagate_to = {true, false};
  return {input_facts(), weighted_facts(), relu_facts(), weighted_facts(), weighted_facts(), OpFacts(), loss};
}

std::vector<std::vector<int>> params_per_node(const Graph& g) {
  std::vector<std::vector<int>> p(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].type == "Convolution" || g.nodes[n].type == "InnerProduct") p[n] = {static_cast<int>(n)};
  return p;
}

int value(const Graph& g, const std::string& name, int nth = 0) {
  for (int v = 0; v < static_cast<int>(g.values.size()); ++v)
    if (g.values[v].name == name && nth-- == 0) return v;
  return -1;
}

TEST(Plan, GradientsFlowBackToLearnableLayersAndSumAtAFork) {
  Graph g = graph_of(kFork, {2, 8});
  auto facts = fork_facts();
  Plan p = make_plan(g, facts, true, false, params_per_node(g), plain(), true);
  // Every node but the input runs backward; nothing propagates into the Input.
  EXPECT_FALSE(p.grad.runs_backward[0]);
  for (int n = 1; n < 7; ++n) EXPECT_TRUE(p.grad.runs_backward[n]) << g.nodes[n].name;
  EXPECT_FALSE(p.grad.need_in_grad[1][0]) << "the conv's input is data: no gradient";
  EXPECT_FALSE(p.grad.need_in_grad[6][1]) << "the loss's target cannot take a gradient";
  // The relu output feeds ip_a and ip_b: backward visits ip_b first (writes), ip_a second (sums).
  EXPECT_TRUE(p.grad.need_in_grad[3][0] && p.grad.need_in_grad[4][0]);
  EXPECT_FALSE(p.grad.accumulate_in_grad[4][0]);
  EXPECT_TRUE(p.grad.accumulate_in_grad[3][0]);
  EXPECT_EQ(p.memory.scratch_value.size(), 1u);
  // Each parameter is ready right after its own node's backward.
  for (int n : {1, 3, 4}) EXPECT_EQ(p.grad.grad_ready_after[n], std::vector<int>{n});
  EXPECT_FLOAT_EQ(p.grad.loss_weight[value(g, "loss")], 1.f);
}

TEST(Plan, TestPhaseHasNoGradients) {
  Graph g = graph_of(kFork, {2, 8}, proto::TEST);
  Plan p = make_plan(g, fork_facts(), false, false, params_per_node(g), plain(), true);
  for (bool b : p.grad.runs_backward) EXPECT_FALSE(b);
  for (bool b : p.grad.has_grad) EXPECT_FALSE(b);
  EXPECT_TRUE(p.memory.scratch_value.empty());
}

TEST(Plan, InPlaceReluSharesItsInputsBuffer) {
  Graph g = graph_of(kFork, {2, 8});
  Plan p = make_plan(g, fork_facts(), true, false, params_per_node(g), plain(), true);
  int c0 = value(g, "c", 0), c1 = value(g, "c", 1);
  EXPECT_EQ(p.alias.data_alias[c1], c0);
  // Not when the ReLU's backward would need its input (a negative slope reads x).
  auto facts = fork_facts();
  facts[2].backward_reads_input = true;
  Plan q = make_plan(g, facts, true, false, params_per_node(g), plain(), true);
  EXPECT_EQ(q.alias.data_alias[c1], -1);
  // Nor when the producer's backward reads what the ReLU would overwrite.
  facts = fork_facts();
  facts[1].backward_reads_output = true;
  Plan r = make_plan(g, facts, true, false, params_per_node(g), plain(), true);
  EXPECT_EQ(r.alias.data_alias[c1], -1);
}

// Which values deploy's bf16 and int8 passes may hand over in another type: not a blob
// rewritten in place (its buffer is shared), not a net output.
TEST(Plan, OwnBufferValuesAreNeitherRewrittenInPlaceNorNetOutputs) {
  Graph g = graph_of(kFork, {2, 8});
  const std::vector<bool> own = own_buffer_values(g);
  EXPECT_TRUE(own[value(g, "x")]);
  EXPECT_FALSE(own[value(g, "c", 0)]);
  EXPECT_FALSE(own[value(g, "c", 1)]);
  EXPECT_TRUE(own[value(g, "a")]);
  EXPECT_TRUE(own[value(g, "s")]);
  EXPECT_FALSE(own[value(g, "loss")]);
}

TEST(Plan, BuffersWhoseLivesDoNotOverlapShareTheArena) {
  // A chain of inference layers: each value dies once the next layer read it.
  const char* chain = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 256 } } }
layer { name: "f1" type: "InnerProduct" bottom: "x" top: "y1" }
layer { name: "f2" type: "InnerProduct" bottom: "y1" top: "y2" }
layer { name: "f3" type: "InnerProduct" bottom: "y2" top: "y3" }
layer { name: "f4" type: "InnerProduct" bottom: "y3" top: "y4" }
layer { name: "f5" type: "InnerProduct" bottom: "y4" top: "out" }
)";
  Graph g = graph_of(chain, {1, 256}, proto::TEST);
  std::vector<OpFacts> facts(6, weighted_facts());
  facts[0] = input_facts();
  Plan shared = make_plan(g, facts, false, false, params_per_node(g), plain(), true);
  const size_t one = 256 * sizeof(float);
  // y1..y4 and out: two intermediates alive at once at most, plus the output to the end.
  EXPECT_LE(shared.memory.arena_bytes, 3 * one);
  Plan own = make_plan(g, facts, false, false, params_per_node(g), plain(), false);
  EXPECT_EQ(own.memory.arena_bytes, 0u) << "reuse_buffers off: every buffer is its own";
  EXPECT_EQ(own.memory.data_offset[value(g, "y2")], MemoryPlan::kDedicated);
}

TEST(Plan, ConcatInPlaceHasProducersWriteIntoTheirRuns) {
  const char* text = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 4 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" }
layer { name: "b" type: "InnerProduct" bottom: "x" top: "b" }
layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "y" }
)";
  Graph g = graph_of(text, {1, 4}, proto::TEST);
  g.values[value(g, "y")].shape = {1, 8};
  OpFacts cat;
  cat.input_runs_in_output = {0, 4};
  std::vector<OpFacts> facts{input_facts(), weighted_facts(), weighted_facts(), cat};
  Plan p = make_plan(g, facts, false, false, params_per_node(g), plain(), true);
  int y = value(g, "y");
  EXPECT_EQ(p.alias.data_alias[value(g, "a")], y);
  EXPECT_EQ(p.alias.data_alias[value(g, "b")], y);
  EXPECT_EQ(p.alias.data_alias_offset[value(g, "b")], 4 * sizeof(float));
  // In training, with a loss after it, the Concat's backward splits the gradient: no runs.
  Graph tg = graph_of(
      std::string(text) + R"(layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "x" top: "l" })", {1, 4});
  tg.values[value(tg, "y")].shape = {1, 8};
  facts.push_back(loss_facts());
  facts.back().can_propagate_to = {true, false};
  Plan t = make_plan(tg, facts, true, false, params_per_node(tg), plain(), true);
  EXPECT_TRUE(t.grad.runs_backward[3]);
  EXPECT_EQ(t.alias.data_alias[value(tg, "a")], -1);
}

// A kernel that adds its output onto a residual (OpFacts::output_adds_onto_input) writes into
// the residual's buffer when no later node reads the residual, at inference, with buffers
// reused; otherwise the output has its own buffer.
TEST(Plan, OutputsAddedOntoAResidualTakeItsBufferWhenNothingLaterReadsIt) {
  const std::string head = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 4 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" }
layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" }
)";
  const std::string adds = R"(layer { name: "c" type: "Convolution" bottom: "b" bottom: "a" top: "c" }
)";
  auto facts_of = [](const Graph& g) {
    std::vector<OpFacts> facts(g.nodes.size(), weighted_facts());
    facts[0] = input_facts();
    facts[3].output_adds_onto_input = 1;
    if (g.nodes.back().name == "loss") {
      facts.back() = loss_facts();
      facts.back().can_propagate_to = {true, false};
    }
    return facts;
  };
  auto alias_of_c = [&](const std::string& text, Phase phase, bool reuse) {
    Graph g = graph_of(text, {1, 4}, phase);
    Plan p = make_plan(g, facts_of(g), phase == proto::TRAIN, false, params_per_node(g), plain(), reuse);
    const int a = p.alias.data_alias[value(g, "c")];
    return a < 0 ? std::string("own buffer") : g.values[a].name;
  };
  EXPECT_EQ(alias_of_c(head + adds, proto::TEST, true), "a");  // b read a before c runs
  EXPECT_EQ(alias_of_c(head + adds, proto::TEST, false), "own buffer");
  const std::string loss = R"(layer { name: "loss" type: "EuclideanLoss" bottom: "c" bottom: "x" top: "l" }
)";
  EXPECT_EQ(alias_of_c(head + adds + loss, proto::TRAIN, true), "own buffer");  // c runs backward
  const std::string later = R"(layer { name: "d" type: "InnerProduct" bottom: "a" top: "d" }
)";
  EXPECT_EQ(alias_of_c(head + adds + later, proto::TEST, true), "own buffer");
  // Never onto the caller's input.
  const std::string onto_x = R"(layer { name: "c" type: "Convolution" bottom: "b" bottom: "x" top: "c" }
)";
  EXPECT_EQ(alias_of_c(head + onto_x, proto::TEST, true), "own buffer");
  // Nor onto a value of another shape.
  Graph g = graph_of(head + adds, {1, 4}, proto::TEST);
  g.values[value(g, "c")].shape = {1, 8};
  Plan p = make_plan(g, facts_of(g), false, false, params_per_node(g), plain(), true);
  EXPECT_EQ(p.alias.data_alias[value(g, "c")], -1);
}

// A batch known only when the net runs (Filter): the values it reaches stay plain, whatever
// their producers prefer, and are not placed inside a Concat's output (the runs' offsets
// hold for one batch only); values before it keep their layout and placement.
TEST(Plan, ValuesTakingTheirBatchFromDataStayPlainAndApart) {
  const char* text = R"(
layer { name: "in" type: "Input" top: "x" top: "sel" input_param { shape { dim: 1 dim: 8 dim: 4 dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" }
layer { name: "filter" type: "Filter" bottom: "c" bottom: "sel" top: "f" }
layer { name: "a" type: "Convolution" bottom: "f" top: "a" }
layer { name: "k" type: "Convolution" bottom: "a" top: "z" }
layer { name: "b1" type: "Convolution" bottom: "f" top: "b1" }
layer { name: "b2" type: "Convolution" bottom: "f" top: "b2" }
layer { name: "cat" type: "Concat" bottom: "b1" bottom: "b2" top: "y" }
layer { name: "g" type: "Convolution" bottom: "x" top: "g" }
layer { name: "w" type: "Convolution" bottom: "g" top: "w" }
layer { name: "d1" type: "Convolution" bottom: "x" top: "d1" }
layer { name: "d2" type: "Convolution" bottom: "x" top: "d2" }
layer { name: "cat0" type: "Concat" bottom: "d1" bottom: "d2" top: "y0" }
)";
  Graph g = graph_of(text, {1, 8, 4, 4}, proto::TEST);
  g.values[value(g, "y")].shape = g.values[value(g, "y0")].shape = {1, 16, 4, 4};
  OpFacts conv = weighted_facts(), filter, cat;
  conv.layout_rule = LayoutRule::any_in_any_out;
  filter.batch_from_data = true;
  cat.input_runs_in_output = {0, 128};
  cat.plain_output_takes_plain_inputs = true;
  std::vector<OpFacts> facts{input_facts(), conv, filter, conv, conv, conv, conv, cat, conv, conv, conv, conv, cat};
  const dnnl::memory::desc blocked({1, 8, 4, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nChw8c);
  PreferredLayout prefer_blocked = [&](int, int, const std::vector<dnnl::memory::desc>&) { return blocked; };
  Plan p = make_plan(g, facts, false, false, params_per_node(g), prefer_blocked, true);
  for (const char* v : {"f", "a", "z", "b1", "b2", "y"}) EXPECT_TRUE(p.batch_from_data[value(g, v)]) << v;
  for (const char* v : {"x", "c", "g", "w", "d1", "d2", "y0"}) EXPECT_FALSE(p.batch_from_data[value(g, v)]) << v;
  // A convolution's output read only by a convolution is blocked, unless its batch is the data's.
  EXPECT_TRUE(p.is_blocked(value(g, "g")));
  EXPECT_FALSE(p.is_blocked(value(g, "a")));
  // A Concat places its inputs inside its output, unless their batch is the data's.
  EXPECT_EQ(p.alias.data_alias[value(g, "d1")], value(g, "y0"));
  EXPECT_EQ(p.alias.data_alias[value(g, "b1")], -1);
  EXPECT_EQ(p.alias.data_alias[value(g, "b2")], -1);
  // check_plan refuses a blocked one.
  EXPECT_NO_THROW(check_plan(g, facts, p));
  p.layout[value(g, "a")] = blocked;
  try {
    check_plan(g, facts, p);
    ADD_FAILURE() << "a blocked value with the data's batch passed check_plan";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("'a' takes its batch from the data"), std::string::npos) << e.what();
  }
}

// Each invariant check_plan() guards, broken on purpose.
TEST(Plan, CheckPlanNamesEachBrokenInvariant) {
  Graph g = graph_of(kFork, {2, 8});
  auto facts = fork_facts();
  const Plan good = make_plan(g, facts, true, false, params_per_node(g), plain(), true);
  EXPECT_NO_THROW(check_plan(g, facts, good));
  auto expect_broken = [&](const Plan& p, const std::string& words) {
    try {
      check_plan(g, facts, p);
      ADD_FAILURE() << "no error for: " << words;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Plan p = good;
  p.grad.accumulate_in_grad[3][0] = false;  // the fork's second writer would overwrite
  expect_broken(p, "must be summed");
  p = good;
  p.grad.accumulate_in_grad[4][0] = true;  // the first writer would add to garbage
  expect_broken(p, "first writer");
  p = good;
  p.grad.has_grad[value(g, "a")] = false;
  expect_broken(p, "has no buffer");
  p = good;
  p.grad.runs_backward[3] = false;
  expect_broken(p, "without running backward");
  p = good;
  int c0 = value(g, "c", 0), c1 = value(g, "c", 1);
  p.alias.data_alias[c0] = c1;  // c1 -> c0 -> c1
  expect_broken(p, "cycle");
  p = good;
  p.alias.data_alias[value(g, "a")] = value(g, "b");  // an inner product may not share
  expect_broken(p, "no op allows it");
  p = good;
  ASSERT_GE(p.memory.intervals.size(), 2u);
  // Put every arena buffer at offset 0: some are live together.
  for (auto& o : p.memory.data_offset)
    if (o != MemoryPlan::kDedicated) o = 0;
  for (auto& o : p.memory.grad_offset)
    if (o != MemoryPlan::kDedicated) o = 0;
  expect_broken(p, "overlap");
  p = good;
  p.memory.arena_bytes = 64;
  expect_broken(p, "outside");
  p = good;
  p.layout.pop_back();
  expect_broken(p, "do not match the graph");
}

}  // namespace
}  // namespace bks
