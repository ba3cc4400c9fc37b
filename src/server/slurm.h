// `bakusoku serve --scheduler slurm`: training jobs go to a Slurm cluster as batch jobs
// (`sbatch` of a script that runs `srun bakusoku train ...`, one task per rank), their
// state comes from `squeue` while Slurm holds them and from `sacct` (or `scontrol`) after,
// and abort is `scancel --signal=INT`: every rank snapshots and stops, as under mpirun.
// Slurm is the queue here: the server hands every queued job over at once.
#pragma once

#include <string>
#include <vector>

namespace bks::server::slurm {

// One training job as Slurm runs it.
struct BatchJob {
  std::string name;                // --job-name
  std::string dir;                 // its working directory (output.txt is appended there)
  int tasks = 1;                   // ranks
  int cpus_per_task = 1;           // = --threads of each rank
  std::vector<std::string> train;  // `bakusoku train ...`, argv[0] the binary
};

// The sbatch script for `job`.
std::string batch_script(const BatchJob& job);

// Checks that Slurm's commands are on PATH and that the controller answers (`sinfo`);
// InputError saying what is missing otherwise (the server refuses to start).
void check_cluster();

// Submits `script_file` with sbatch; returns Slurm's job id. RuntimeError with sbatch's own
// words when it refuses.
std::string submit(const std::string& script_file);

// Where a submitted job is. `active`: Slurm still holds it (PENDING, RUNNING, ...);
// otherwise `state` is how it ended (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...) and
// `exit_code` its tasks' exit code, or `known` is false when no Slurm command knows it.
struct JobState {
  bool known = false;
  bool active = false;
  std::string state;
  int exit_code = 0;
};
JobState query(const std::string& id);

// scancel: with `signal` ("INT") the signal goes to every task of the job; without, Slurm
// ends the job.
void cancel(const std::string& id, const std::string& signal = "");

}  // namespace bks::server::slurm
