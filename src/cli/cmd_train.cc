#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/signals.h"
#include "dist/communicator.h"
#include "train/trainer.h"

namespace bks::cli {

Runner add_train(CLI::App& app, const std::string& command_line) {
  auto* cmd = app.add_subcommand("train", "Train a network from a Caffe solver prototxt");
  auto opt = std::make_shared<TrainOptions>();
  opt->command_line = command_line;
  cmd->add_option("--solver", opt->solver, "Solver prototxt")->required();
  auto* w = cmd->add_option("--weights", opt->weights, "Initial weights (.safetensors or .caffemodel)");
  cmd->add_option("--snapshot", opt->snapshot, "Resume from this .solverstate")->excludes(w);
  cmd->add_option("--out", opt->out_dir, "Run directory (default runs/<net>-<UTC time>)");
  cmd->add_option("--threads", opt->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu", opt->gpu, "GPU id (needs a CUDA build)");
  cmd->add_option("--keep-snapshots", opt->keep_snapshots, "Keep only the newest N snapshots (default: all)")
      ->check(CLI::NonNegativeNumber);
  // Data-parallel runs (started by mpirun or srun; docs/distributed.md).
  cmd->add_option("--bucket-mb", opt->bucket_mb, "Gradient allreduce bucket size in MB (default 25)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--first-bucket-mb", opt->first_bucket_mb,
                  "Size of the first gradient bucket in MB, small so communication starts early (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dist-debug", opt->dist_debug,
                "Check before every allreduce that all ranks reduce the same gradient bucket");
  return [opt] {
    if (opt->gpu >= 0) input_error("--gpu {}: this build of bakusoku has no CUDA backend", opt->gpu);
    install_interrupt_handler();
    TrainResult r = train(*opt);
    if (dist::world().rank() > 0) return r.interrupted ? 130 : 0;  // rank 0 reports for all
    std::string acc;
    for (auto& [k, v] : r.last_test) acc += fmt::format("  {} {:.4f}", k, v);
    fmt::print("{} iterations in {:.1f} s ({:.1f} s training, the rest testing and setup): {:.0f} images/s{}{}\n",
               r.trained_iterations, r.wall_s, r.train_s, r.images_per_s,
               r.world_size > 1 ? fmt::format(" over {} ranks", r.world_size) : "",
               acc.empty() ? "" : "\nFinal test:" + acc);
    fmt::print("Run directory: {}\n", r.run_dir);
    return r.interrupted ? 130 : 0;
  };
}

}  // namespace bks::cli
