#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/log.h"
#include "formats/weights.h"
#include "runtime/evaluate.h"

namespace bks::cli {

Runner add_test(CLI::App& app) {
  auto* cmd = app.add_subcommand("test", "Score a trained model: mean of each net output over N batches");
  struct Opts {
    std::string model, weights;
    int iterations = 50, threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Net prototxt (its TEST phase is used)")->required();
  cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("--iterations", o->iterations, "Batches to score (default 50)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  return [o] {
    auto m = load_model(o->model, proto::TEST, o->threads);
    int loaded = load_weights(o->weights, m->store);
    if (loaded == 0) input_error("{}: none of the net's parameter blobs are in this file", o->weights);
    Net& net = *m->net;
    Evaluation ev = evaluate(net, o->iterations, 0);
    for (size_t k = 0; k < net.outputs().size(); ++k)
      fmt::print("{} = {:.4f}\n", net.graph().values[net.outputs()[k]].name, ev.output_means[k]);
    fmt::print("weighted loss sum = {:.4f}\n", ev.loss);
    return 0;
  };
}

}  // namespace bks::cli
