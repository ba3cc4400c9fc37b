#include <fmt/format.h>

#include "backend/accelerator.h"
#include "cli/commands.h"
#include "cli/model.h"
#include "cli/train_ranks.h"
#include "core/error.h"
#include "core/log.h"
#include "core/signals.h"
#include "dist/communicator.h"
#include "ops/weight_grids.h"
#include "train/trainer.h"

namespace bks::cli {

Runner add_train(CLI::App& app, const std::string& command_line) {
  auto* cmd = app.add_subcommand("train", "Train a network from a Caffe solver prototxt");
  auto opt = std::make_shared<TrainOptions>();
  opt->command_line = command_line;
  cmd->add_option("--solver", opt->solver, "Solver prototxt")->required();
  auto* w = cmd->add_option("--weights", opt->weights, "Initial weights (.safetensors or .caffemodel)");
  cmd->add_flag("--reinit-mismatched", opt->reinit_mismatched,
                "Blobs of --weights whose shape differs from the net's (a classifier resized for another class "
                "count) start from their fillers instead of failing")
      ->needs(w);
  cmd->add_option("--snapshot", opt->snapshot, "Resume from this .solverstate")->excludes(w);
  cmd->add_option("--out", opt->out_dir, "Run directory (default runs/<net>-<UTC time>)");
  cmd->add_option("--threads", opt->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu", opt->gpu,
                  "GPU to train on (default: as the solver's solver_mode and device_id say; -1: the CPU)");
  cmd->add_flag("--tf32", opt->tf32,
                "TF32 arithmetic for FP32 convolutions and matrix products on the GPU (faster; changes results)");
  add_kernel_option(cmd, opt->kernels);
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
  cmd->add_flag("--global-batch", opt->global_batch,
                "batch_size is all ranks' batch together (each reads batch_size / N); by default it is per rank");
  cmd->add_flag("--sync-bn", opt->sync_bn, "BatchNorm statistics over all ranks' batches (SyncBatchNorm)");
  cmd->add_option("--lr-scale", opt->lr_scale, "none (default) or linear: the learning rate times the ranks")
      ->check(CLI::IsMember({"none", "linear"}));
  cmd->add_option("--warmup-iters", opt->warmup_iters, "With --lr-scale linear: iterations to ramp up over")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--qat", opt->qat,
                  "Quantization-aware training: int8 (weights and inputs on the INT8 deployment's grid; deploy "
                  "--precision int8 then needs no calibration), binary or pow2 (weights only: +-mean |w|, or "
                  "+-powers of two, per output channel), or xnor (binary weights, and binary inputs to every "
                  "convolution / inner product but the first and the last: XNOR-Net)");
  cmd->add_flag("--qat-every-layer", opt->qat_every_layer,
                "With --qat binary / xnor: binarize the first and the last convolution / inner product too "
                "(BinaryConnect as published); by default they stay float, as XNOR-Net keeps them");
  cmd->add_option("--prune", opt->prune,
                  "Magnitude pruning: the fraction of each convolution / inner product's weights to zero, in [0, 1)");
  cmd->add_option("--prune-from", opt->prune_from, "With --prune: the iteration the pruning ramp starts (default 0)");
  cmd->add_option("--prune-until", opt->prune_until,
                  "With --prune: the iteration it reaches the full sparsity (default: 3/4 of max_iter)");
  cmd->add_option("--prune-every", opt->prune_every,
                  "With --prune: iterations between mask updates on the ramp (default: 20 updates)");
  cmd->add_option("--prune-scope", opt->prune_scope,
                  "With --prune: global (default; one magnitude ranking over all those layers), lamp (one ranking "
                  "by layer-adaptive LAMP score, w^2 over the sum of w'^2 of its layer's larger weights: no common "
                  "weight scale needed) or layer (each layer pruned to the sparsity on its own)")
      ->check(CLI::IsMember({"global", "lamp", "layer"}));
  cmd->add_option("--teacher", opt->teacher,
                  "Knowledge distillation: a trained network (prototxt or ONNX) whose class scores the student also "
                  "learns, run for inference on every batch");
  cmd->add_option("--teacher-weights", opt->teacher_weights,
                  "With --teacher: its trained weights (an ONNX teacher has its own)");
  cmd->add_option("--temperature", opt->temperature,
                  "With --teacher: the softmax temperature both nets' scores are compared at (default 4)");
  cmd->add_option("--alpha", opt->alpha,
                  "With --teacher: the weight of the teacher's soft targets; the true labels get 1 - alpha (default "
                  "0.5)");
  auto ranks = std::make_shared<int>(0);
  cmd->add_option("--ranks", *ranks, "Run N ranks on this machine through mpirun (prints the mpirun line it runs)")
      ->check(CLI::PositiveNumber);
  auto backend = std::make_shared<std::string>("mpi");
  cmd->add_option("--dist-backend", *backend,
                  "How ranks reduce gradients: mpi (default; CPU) or nccl (GPU ranks, needs a CUDA build)");
  auto no_pin = std::make_shared<bool>(false);
  cmd->add_flag("--no-pin", *no_pin, "With --ranks: leave the ranks unpinned (other work shares these cores)");
  return [opt, ranks, no_pin, backend] {
    if (*backend == "nccl")
      input_error(
          "--dist-backend nccl: NCCL reduces gradients between GPU ranks, and this build of bakusoku has no "
          "GPU backend; use --dist-backend mpi (the default)");
    if (*backend != "mpi") input_error("--dist-backend must be mpi or nccl, got '{}'", *backend);
    if (!opt->qat.empty()) weight_grid(opt->qat);  // a clear error for an unknown grid
    if (opt->qat_every_layer && opt->qat != "binary" && opt->qat != "xnor")
      input_error("--qat-every-layer goes with --qat binary or --qat xnor (the other grids round every layer)");
    use_kernels(opt->kernels);
    if (*ranks > 0) {
      if (dist::launched_by_mpi()) input_error("--ranks: already running under an MPI launcher; drop --ranks");
      run_under_mpirun(mpirun_command(*ranks, *opt, log::level() == log::Level::debug, !*no_pin));
    }
    if (*no_pin) input_error("--no-pin goes with --ranks");
    if (opt->lr_scale == "none" && opt->warmup_iters > 0) input_error("--warmup-iters needs --lr-scale linear");
    if (opt->gpu >= 0)  // before any work: no CUDA build, no GPU, no such index
      if (std::string problem = gpu_problem(opt->gpu); !problem.empty())
        input_error("--gpu {}: {} (--gpu -1 trains on the CPU)", opt->gpu, problem);
    if (opt->gpu < TrainOptions::kAsSolverSays) input_error("--gpu {}: give a GPU index, or -1 for the CPU", opt->gpu);
    install_interrupt_handler();
    TrainResult r = train(*opt);
    if (dist::world().rank() > 0) return r.interrupted ? 130 : 0;  // rank 0 reports for all
    std::string acc;
    for (auto& [k, v] : r.last_test) acc += fmt::format("  {} {:.4f}", k, v);
    fmt::print("{} iterations in {:.1f} s ({:.1f} s training, the rest testing and setup): {:.0f} {}/s{}{}\n",
               r.trained_iterations, r.wall_s, r.train_s, r.images_per_s, r.item_unit,
               r.world_size > 1 ? fmt::format(" over {} ranks", r.world_size) : "",
               acc.empty() ? "" : "\nFinal test:" + acc);
    fmt::print("Run directory: {}\n", r.run_dir);
    return r.interrupted ? 130 : 0;
  };
}

}  // namespace bks::cli
