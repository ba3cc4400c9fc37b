// Pass: a DistillationLoss beside the softmax classification loss (see insert_distillation.h).
#include "passes/insert_distillation.h"

#include <fmt/format.h>

#include "core/error.h"
#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "ops/shape_inference.h"

namespace bks {

PassReport insert_distillation(Graph& g, float temperature, float alpha) {
  PassReport r{"insert-distillation", {}};
  if (!(alpha >= 0.f && alpha <= 1.f)) input_error("--alpha must be in [0, 1], got {}", alpha);
  int loss = -1;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    const OpTraits t = op_traits(g.nodes[n]);
    if (!t.loss || t.inference_form != "Softmax") continue;
    if (loss >= 0)
      input_error("{}: distillation needs one softmax classification loss, and {} is a second", g.source,
                  g.describe(n));
    loss = n;
  }
  if (loss < 0)
    input_error("{}: distillation needs a softmax classification loss (SoftmaxWithLoss) in the TRAIN net; it has none",
                g.source);
  infer_shapes(g, proto::TRAIN);
  Node& classify = g.nodes[loss];
  const int scores = classify.inputs[0];
  const Shape shape = g.values[scores].shape;
  if (classify.loss_weight.empty()) classify.loss_weight = {1.f};
  classify.loss_weight[0] *= 1.f - alpha;

  Node input;
  input.name = kTeacherScores;
  input.where = classify.where;
  make_external_input(input, {shape});
  input.outputs = {g.add_value(kTeacherScores)};
  Node distill;
  distill.name = "distillation";
  distill.type = "DistillationLoss";
  distill.where = classify.where;
  proto::LayerParameter layer;
  layer.set_type(distill.type);
  layer.mutable_distillation_param()->set_temperature(temperature);
  distill.attrs = attrs_from_caffe(layer, distill.where);
  distill.inputs = {scores, input.outputs[0]};
  distill.propagate_down = {true, false};
  distill.loss_weight = {alpha};
  distill.outputs = {g.add_value("distillation_loss")};
  r.changes.push_back(fmt::format("'{}' {} learns from '{}' at temperature {} (weight {}; {} '{}' weight {})",
                                  g.values[scores].name, shape_str(shape), kTeacherScores, temperature, alpha,
                                  classify.type, classify.name, classify.loss_weight[0]));
  g.nodes.push_back(std::move(input));  // last: a net's first Input still tells its batch
  g.nodes.push_back(std::move(distill));
  relink(g);
  verify_graph(g, r.pass);
  return r;
}

}  // namespace bks
