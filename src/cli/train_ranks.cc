#include "cli/train_ranks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/sysinfo.h"

namespace bks::cli {

std::vector<std::string> mpirun_command(int ranks, const TrainOptions& opt, bool verbose, bool pin) {
  const SysInfo si = query_sysinfo();
  const int cores = std::max(1, si.physical_cores > 0 ? si.physical_cores : si.logical_cpus);
  const int threads = opt.threads > 0 ? opt.threads : std::max(1, cores / ranks);
  std::vector<std::string> c = {"mpirun", "-np", std::to_string(ranks)};
  if (geteuid() == 0) c.push_back("--allow-run-as-root");  // Open MPI refuses root without it
  if (ranks * threads <= cores && pin) {
    // Each rank on `threads` cores of its own.
    c.insert(c.end(), {"--map-by", fmt::format("slot:PE={}", threads), "--bind-to", "core"});
  } else if (ranks <= cores) {
    c.insert(c.end(), {"--bind-to", "none"});
  } else {
    c.insert(c.end(), {"--oversubscribe", "--bind-to", "none"});
  }
  c.push_back(self_executable());
  if (verbose) c.push_back("-v");
  c.insert(c.end(), {"train", "--solver", opt.solver, "--threads", std::to_string(threads)});
  auto add = [&](const char* flag, const std::string& v) {
    if (!v.empty()) c.insert(c.end(), {flag, v});
  };
  add("--weights", opt.weights);
  if (opt.reinit_mismatched) c.push_back("--reinit-mismatched");
  add("--snapshot", opt.snapshot);
  add("--out", opt.out_dir);
  if (opt.keep_snapshots > 0) add("--keep-snapshots", std::to_string(opt.keep_snapshots));
  if (opt.bucket_mb != TrainOptions().bucket_mb) add("--bucket-mb", fmt::format("{}", opt.bucket_mb));
  if (opt.gpu != TrainOptions().gpu) add("--gpu", fmt::format("{}", opt.gpu));
  if (opt.tf32) c.push_back("--tf32");
  for (const std::string& k : opt.kernels) add("--kernel", k);
  if (opt.first_bucket_mb != TrainOptions().first_bucket_mb)
    add("--first-bucket-mb", fmt::format("{}", opt.first_bucket_mb));
  if (opt.dist_debug) c.push_back("--dist-debug");
  if (opt.global_batch) c.push_back("--global-batch");
  if (opt.sync_bn) c.push_back("--sync-bn");
  if (opt.lr_scale != "none") add("--lr-scale", opt.lr_scale);
  if (opt.warmup_iters > 0) add("--warmup-iters", std::to_string(opt.warmup_iters));
  add("--qat", opt.qat);
  if (opt.qat_every_layer) c.push_back("--qat-every-layer");
  if (opt.prune != 0) add("--prune", fmt::format("{}", opt.prune));
  if (opt.prune_from != 0) add("--prune-from", std::to_string(opt.prune_from));
  if (opt.prune_until >= 0) add("--prune-until", std::to_string(opt.prune_until));
  if (opt.prune_every != 0) add("--prune-every", std::to_string(opt.prune_every));
  if (opt.prune_scope != TrainOptions().prune_scope) add("--prune-scope", opt.prune_scope);
  add("--teacher", opt.teacher);
  add("--teacher-weights", opt.teacher_weights);
  if (!opt.teacher.empty()) {
    add("--temperature", fmt::format("{}", opt.temperature));
    add("--alpha", fmt::format("{}", opt.alpha));
  }
  return c;
}

void run_under_mpirun(const std::vector<std::string>& command) {
  const std::string mpirun = find_on_path(command.front());
  if (mpirun.empty())
    input_error("--ranks: '{}' is not on PATH; install Open MPI (scripts/install_deps.sh installs openmpi-bin)",
                command.front());
  std::string line;
  for (const std::string& w : command) {
    if (!line.empty()) line.push_back(' ');
    line.append(shell_word(w));
  }
  std::printf("Running: %s\n", line.c_str());
  std::fflush(stdout);
  std::vector<char*> argv;
  for (const std::string& w : command) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  execv(mpirun.c_str(), argv.data());
  runtime_error("--ranks: could not run {}: {}", mpirun, std::strerror(errno));
}

}  // namespace bks::cli
