#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/log.h"
#include "engine/bundle.h"
#include "engine/session.h"
#include "formats/weights.h"
#include "runtime/evaluate.h"

namespace bks::cli {

namespace {

// Scores a deployment bundle on its recorded TEST data: top-1 and top-5 accuracy.
int test_bundle(const std::string& path, const std::string& data, int iterations, int threads) {
  Bundle b = load_bundle(path);
  auto scored = build_bundle_net(b, scoring_net(b, path, data), path, threads, inference_options(b, path));
  Net& net = *scored->net;
  auto [batch, samples] = net.data_extent();
  Evaluation ev = evaluate(net, iterations, 0);
  const char* precision = precision_name(bundle_precision(b));
  fmt::print("{} ({} precision): {} batches of {} from a set of {}\n", path, precision, iterations, batch, samples);
  for (size_t k = 0; k < net.outputs().size(); ++k)
    fmt::print("{} = {:.4f}\n", net.graph().values[net.outputs()[k]].name, ev.output_means[k]);
  return 0;
}

}  // namespace

Runner add_test(CLI::App& app) {
  auto* cmd = app.add_subcommand("test", "Score a trained model: mean of each net output over N batches");
  struct Opts {
    std::string model, weights, data;
    int iterations = 50, threads = 0;
    StateFlags state;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Net prototxt (its TEST phase is used) or a bundle (.bks) from deploy")
      ->required();
  cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel); not for a bundle");
  cmd->add_option("--data", o->data, "Bundle only: dataset to score on (default: the one its net was tested on)");
  cmd->add_option("--iterations", o->iterations, "Batches to score (default 50)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_state_options(cmd, o->state);
  return [o] {
    if (is_bundle_file(o->model)) {
      if (!o->state.stages.empty() || o->state.level >= 0)
        input_error("test: --stage and --level apply to a prototxt; a bundle's net is fixed at deploy");
      return test_bundle(o->model, o->data, o->iterations, o->threads);
    }
    if (o->weights.empty()) input_error("test: --weights is required for a prototxt model");
    if (!o->data.empty()) input_error("test: --data applies to a bundle (.bks); a prototxt names its own data");
    auto m = load_model(o->model, proto::TEST, o->threads, o->state);
    load_weights(o->weights, m->store);
    Net& net = *m->net;
    Evaluation ev = evaluate(net, o->iterations, 0);
    for (size_t k = 0; k < net.outputs().size(); ++k)
      fmt::print("{} = {:.4f}\n", net.graph().values[net.outputs()[k]].name, ev.output_means[k]);
    fmt::print("weighted loss sum = {:.4f}\n", ev.loss);
    return 0;
  };
}

}  // namespace bks::cli
