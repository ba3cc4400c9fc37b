#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/log.h"
#include "formats/weights.h"

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
    const auto& outs = net.outputs();
    std::vector<double> sums(outs.size(), 0.0);
    double loss = 0;
    for (int i = 0; i < o->iterations; ++i) {
      loss += net.forward(i);
      for (size_t k = 0; k < outs.size(); ++k) {
        const Tensor& v = net.value(outs[k]);
        double s = 0;
        for (int64_t j = 0; j < v.numel(); ++j) s += v.f32()[j];
        sums[k] += s / static_cast<double>(std::max<int64_t>(v.numel(), 1));
      }
    }
    for (size_t k = 0; k < outs.size(); ++k)
      fmt::print("{} = {:.4f}\n", net.graph().values[outs[k]].name, sums[k] / o->iterations);
    fmt::print("loss = {:.4f}\n", loss / o->iterations);
    return 0;
  };
}

}  // namespace bks::cli
