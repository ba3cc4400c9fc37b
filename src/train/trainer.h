// The training loop behind `bakusoku train`: Caffe's Solver::Solve with bakusoku's run
// directory, metrics, progress display, atomic snapshots and exact resume.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace bks {

struct TrainOptions {
  std::string solver;              // solver prototxt
  std::string weights;             // initial weights (fine-tuning), optional
  bool reinit_mismatched = false;  // blobs of `weights` whose shape differs keep their fillers
  std::string snapshot;            // .solverstate to resume from, optional
  std::string out_dir;             // run directory; default runs/<net>-<UTC time> (or the snapshot's run)
  int threads = 0;                 // 0: all cores
  // The GPU to train on: kAsSolverSays follows the solver's solver_mode and device_id (the
  // CPU, with a warning, when the solver asks for a GPU this machine lacks); -1: the CPU.
  static constexpr int kAsSolverSays = -2;
  int gpu = kAsSolverSays;
  bool tf32 = false;  // TF32 arithmetic for FP32 convolutions and matrix products on a GPU
  std::string command_line;
  // --kernel TYPE=NAME choices (the command line applies them to the kernel registry before
  // training; --ranks passes them on to every rank).
  std::vector<std::string> kernels;
  bool progress = true;    // print progress and test results to stdout
  int keep_snapshots = 0;  // keep the newest N snapshots; 0 keeps all (Caffe's behaviour)
  // Data-parallel runs (launched by mpirun/srun; docs/distributed.md): gradient buckets'
  // sizes, and a check before each reduction that every rank reduces the same bucket.
  double first_bucket_mb = 1;
  double bucket_mb = 25;
  bool dist_debug = false;
  // The prototxt's batch_size is all ranks' batch together (each reads batch_size / N)
  // instead of each rank's (Caffe's rule).
  bool global_batch = false;
  // SyncBatchNorm: BatchNorm layers in training compute their statistics over all ranks'
  // batches (off by default, as in Caffe: each rank normalises its own batch).
  bool sync_bn = false;
  // "linear": the learning rate times the number of ranks, reached by a linear warm-up
  // over `warmup_iters` iterations from the unscaled rate (Goyal et al., 2017). "none": as
  // the solver says.
  std::string lr_scale = "none";
  int64_t warmup_iters = 0;
  // "int8": quantization-aware training (docs/compression.md): FakeQuant before every
  // Convolution / InnerProduct input and int8-rounded weights, trained with the
  // straight-through estimator; deploy --precision int8 then takes the learned ranges. "":
  // plain FP32 training.
  std::string qat;
  // With qat binary / xnor: round the first and the last Convolution / InnerProduct too
  // (BinaryConnect as published); by default they stay float.
  bool qat_every_layer = false;
  // Unstructured magnitude pruning (docs/compression.md): the fraction of every Convolution
  // / InnerProduct weight blob pruned by the end of a cubic ramp from iteration prune_from
  // to prune_until (-1: three quarters of max_iter), masks updated every prune_every
  // iterations of it (0: twenty updates). 0: no pruning.
  double prune = 0;
  int64_t prune_from = 0, prune_until = -1, prune_every = 0;
  // "global": one magnitude ranking over all those layers; "lamp": one ranking by LAMP score;
  // "layer": each on its own.
  std::string prune_scope = "global";
  // Knowledge distillation (docs/compression.md): a trained teacher network (and its
  // weights) scores every training batch, and the student's loss becomes
  // (1 - alpha) x its classification loss + alpha x T^2 x KL(teacher || student) of the
  // softmaxes at temperature T. "": no teacher.
  std::string teacher, teacher_weights;
  float temperature = 4.f;
  float alpha = 0.5f;
};

struct TrainResult {
  std::string run_dir;
  int64_t iterations = 0;            // last iteration reached
  int64_t trained_iterations = 0;    // iterations run in this process
  double wall_s = 0;                 // whole run
  double train_s = 0;                // forward/backward/update only
  double images_per_s = 0;           // training images per second of train_s
  std::string item_unit = "images";  // what images_per_s counts (a TextData net's: characters)
  bool interrupted = false;
  std::string last_snapshot;
  std::map<std::string, double> last_test;  // net output name -> value (test net 0)
  int world_size = 1;                       // ranks that trained together
  double exposed_comm_s = 0;                // time spent waiting for gradient reductions after backward
};

TrainResult train(const TrainOptions& opt);

}  // namespace bks
