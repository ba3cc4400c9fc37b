#include "train/distillation.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "graph/graph_edit.h"

namespace bks {

Teacher::Teacher(const std::string& net, const std::string& weights, int64_t batch, int threads) : net_(net) {
  DeployOptions o;
  o.model = net;
  o.weights = weights;
  o.threads = threads;
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  Graph& g = m.graph;
  // Its scores are what its final Softmax reads: the student learns them at its temperature.
  const std::vector<int> outputs = g.outputs();
  if (outputs.size() != 1)
    input_error("--teacher {}: distillation needs a teacher with one output (its class scores), this one has {}", net,
                outputs.size());
  const int last = g.values[outputs[0]].producer;
  if (last >= 0 && g.nodes[last].type == "Softmax") {
    std::vector<bool> dead(g.nodes.size(), false);
    dead[last] = true;
    erase_nodes(g, dead);
  }
  Bundle b;
  b.graph = bundle_graph(m);
  b.weights = weights_by_layer(m);
  set_input_batch(b.graph, batch);
  session_ = std::make_unique<InferenceSession>(b, net, threads, batch, 0);
  if (session_->inputs().size() != 1 || session_->outputs().size() != 1)
    input_error("--teacher {}: distillation needs a teacher with one input and one output, this one has {} and {}", net,
                session_->inputs().size(), session_->outputs().size());
  input_name_ = session_->value_name(session_->inputs()[0]);
  log::info("Teacher {} ({}): {} {} -> scores {}", net, weights, input_name_, shape_str(input_shape()),
            shape_str(scores_shape()));
}

Teacher::~Teacher() = default;

Shape Teacher::input_shape() const { return session_->value(session_->inputs()[0]).shape(); }
Shape Teacher::scores_shape() const { return session_->value(session_->outputs()[0]).shape(); }

void Teacher::check_matches(const std::string& input_blob, const Shape& input, const Shape& scores) const {
  if (input != input_shape())
    input_error("--teacher {}: it reads '{}' of shape {}, but the student's '{}' is {}", net_, input_name_,
                shape_str(input_shape()), input_blob, shape_str(input));
  if (shape_numel(scores) != shape_numel(scores_shape()))
    input_error(
        "--teacher {}: it scores {} per batch, but the student's classification loss reads scores {}: they "
        "must match",
        net_, shape_str(scores_shape()), shape_str(scores));
}

void Teacher::run(const float* input, float* scores) {
  Tensor& in = session_->value(session_->inputs()[0]);
  std::memcpy(in.raw(), input, in.bytes());
  session_->run();
  const int v = session_->outputs()[0];
  if (session_->net().is_blocked(v)) {  // a convolution's scores, in oneDNN's layout
    Tensor plain = session_->net().plain_copy(v);
    std::memcpy(scores, plain.raw(), plain.bytes());
    return;
  }
  Tensor& out = session_->value(v);
  std::memcpy(scores, out.raw(), out.bytes());
}

}  // namespace bks
