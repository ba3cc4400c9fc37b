// bakusoku factorize: InnerProduct and Convolution layers of a trained net replaced by low-rank pairs
// (engine/low_rank.h), written as a new net and weights file to fine-tune, deploy or time.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/error.h"
#include "engine/low_rank.h"
#include "engine/rewritten_model.h"

namespace bks::cli {

Runner add_factorize(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "factorize", "Replace InnerProduct / Convolution layers by two of low rank (truncated SVD), to fine-tune");
  auto model = std::make_shared<std::string>(), weights = std::make_shared<std::string>(),
       out = std::make_shared<std::string>();
  auto o = std::make_shared<LowRankOptions>();
  cmd->add_option("--model", *model, "The trained net (train/test or deploy prototxt)")->required();
  cmd->add_option("--weights", *weights, "Its weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("--rank", o->rank, "Factorise to this rank (default: by --energy)");
  cmd->add_option("--energy", o->energy,
                  "Keep the smallest rank whose singular values hold this fraction of the sum of their squares "
                  "(default 0.9)");
  cmd->add_option(
         "--layers", o->layers,
         "Layers to factorise, comma-separated (default: every InnerProduct and ungrouped Convolution the rank "
         "makes smaller)")
      ->delimiter(',');
  cmd->add_option("-o,--out", *out, "Directory for net.prototxt and weights.safetensors")->required();
  return [=] {
    const LowRankResult r = factorize_low_rank(*model, *weights, *o);
    if (r.layers.empty()) input_error("{}: no InnerProduct or Convolution layer to factorise", *model);
    fmt::print("{:<16} {:>12} {:>6} {:>8} {:>12} {:>12}\n", "layer", "shape", "rank", "energy", "weights", "after");
    int64_t before_total = 0, after_total = 0;
    for (const LowRankLayer& x : r.layers) {
      const int64_t before = x.outputs * x.inputs, after = x.factorised ? x.rank * (x.outputs + x.inputs) : before;
      before_total += before, after_total += after;
      fmt::print("{:<16} {:>12} {:>6} {:>7.1f}% {:>12} {:>12}{}\n", x.name, fmt::format("{}x{}", x.outputs, x.inputs),
                 x.rank, 100 * x.energy, before, after, x.factorised ? "" : "  (kept: no smaller at this rank)");
    }
    const auto [net_path, weights_path] = write_rewritten_model(
        *out, r.net, r.weights, fmt::format("{} with low-rank layers (bakusoku factorize)", *model), *model, *weights);
    fmt::print("Those layers: {} weights -> {} ({:.1f}x fewer)\nWrote {} and {}\n", before_total, after_total,
               after_total > 0 ? static_cast<double>(before_total) / after_total : 0.0, net_path, weights_path);
    fmt::print("Fine-tune it: bakusoku train --solver S --weights {} (S's net: {})\n", weights_path, net_path);
    return 0;
  };
}

}  // namespace bks::cli
