// bakusoku prune-channels: whole output channels of a trained net's Convolution and InnerProduct
// layers removed (engine/channel_pruning.h), written as a smaller net and weights file to
// fine-tune, deploy or time.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "cli/commands.h"
#include "cli/model.h"
#include "engine/channel_pruning.h"
#include "engine/recalibrate_statistics.h"
#include "engine/rewritten_model.h"

namespace bks::cli {

namespace {

std::string millions(double x) { return fmt::format("{:.2f}M", x / 1e6); }

std::string fewer(double before, double after) {
  return before > 0 ? fmt::format("{:.1f}% fewer", 100 * (1 - after / before)) : std::string("none");
}

}  // namespace

Runner add_prune_channels(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "prune-channels",
      "Remove the least important output channels of Convolution / InnerProduct layers (a smaller net, to fine-tune)");
  auto model = std::make_shared<std::string>(), weights = std::make_shared<std::string>(),
       out = std::make_shared<std::string>();
  auto o = std::make_shared<ChannelPruneOptions>();
  auto recalibrate = std::make_shared<int>(0);
  auto threads = std::make_shared<int>(0);
  cmd->add_option("--model", *model, "The trained net (train/test or deploy prototxt)")->required();
  cmd->add_option("--weights", *weights, "Its weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("--ratio", o->ratio, "Remove this fraction of every prunable layer's output channels, in [0, 1)");
  cmd->add_option("--flops", o->flops,
                  "Or: remove the smallest such fraction that removes this fraction of the convolutions' "
                  "multiply-adds, in (0, 1)");
  cmd->add_option("--criterion", o->criterion,
                  "Which channels go: l1 or l2 (smallest filter norms), bn (smallest BatchNorm/Scale factor); "
                  "default l1");
  cmd->add_option("--multiple", o->multiple,
                  "Keep a multiple of this many channels in each layer (the nearest one), as vector kernels "
                  "pad channels to 8 (AVX2) or 16 (AVX-512); default 1");
  cmd->add_option("--layers", o->layers,
                  "Prune only the channels these layers write, comma-separated (default: every layer whose "
                  "channels can go)")
      ->delimiter(',');
  cmd->add_option("--recalibrate", *recalibrate,
                  "Then estimate BatchNorm statistics anew over this many training batches (default 0: keep "
                  "them; they then describe the unpruned net)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", *threads, "CPU threads for --recalibrate (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--out", *out, "Directory for net.prototxt and weights.safetensors")->required();
  return [=] {
    ChannelPruneResult r = prune_channels(*model, *weights, *o);
    if (*recalibrate > 0) {
      const int blobs = recalibrate_statistics(r.net, *model, r.weights, *recalibrate, *threads);
      fmt::print("Re-estimated {} statistics blobs over {} training batches\n", blobs, *recalibrate);
    }
    fmt::print("Removing {:.0f}% of each layer's output channels{}:\n", 100 * r.ratio,
               o->multiple > 1 ? fmt::format(" (keeping multiples of {})", o->multiple) : "");
    fmt::print("{:<32} {:>9} {:>6}  {}\n", "layers writing the channels", "channels", "kept", "ranked by");
    for (const PrunedGroup& g : r.groups)
      fmt::print("{:<32} {:>9} {:>6}  {}\n", fmt::format("{}", fmt::join(g.layers, " + ")), g.channels, g.kept,
                 g.criterion);
    for (const std::string& k : r.kept_whole) fmt::print("kept whole: {}\n", k);
    if (r.conv_macs_before > 0)
      fmt::print("Convolution multiply-adds per item: {} -> {} ({})\n", millions(r.conv_macs_before),
                 millions(r.conv_macs_after), fewer(r.conv_macs_before, r.conv_macs_after));
    fmt::print("Convolution + InnerProduct multiply-adds per item: {} -> {} ({})\n", millions(r.macs_before),
               millions(r.macs_after), fewer(r.macs_before, r.macs_after));
    const auto [net_path, weights_path] = write_rewritten_model(
        *out, r.net, r.weights, fmt::format("{} with fewer channels (bakusoku prune-channels)", *model), *model,
        *weights);
    int64_t params = 0;
    for (const auto& [name, t] : r.weights) params += t.numel();
    fmt::print("Wrote {} and {} ({} parameters)\n", net_path, weights_path, params);
    fmt::print("Fine-tune it: bakusoku train --solver S --weights {} (S's net: {})\n", weights_path, net_path);
    return 0;
  };
}

}  // namespace bks::cli
