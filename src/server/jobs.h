// The job queue. A training job runs `bakusoku train` as a child process in its own
// directory (<data>/jobs/<id>/: net.prototxt, solver.prototxt, output.txt, run/); an optimize
// job runs `bakusoku optimize` on a trained job's net and snapshot the same way (best.bks and
// its report in its directory, optimize_command below); a dataset
// job is a server thread that runs its work (a `bakusoku pack-dataset` child, dataset_job.h)
// in the same kind of directory. Jobs wait for a free slot (CPU slots now; one per GPU later;
// dataset jobs have one of their own, so packing never waits for training to end) and move
// queued -> running -> done | failed | aborted. Aborted and failed training jobs
// resume from their last snapshot. Jobs left running by a server that stopped are failed
// (and resumable) when the next one starts.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/store.h"
#include "server/usage_log.h"
#include "train/run_dir.h"  // snapshot_files

namespace bks::server {

struct ServerConfig {
  std::string data_dir;
  std::string binary;       // bakusoku itself, for training children
  int slots = 1;            // jobs running at once
  int threads_per_job = 1;  // --threads of each training child, split among its ranks
  bool slurm = false;       // training jobs go to Slurm (slurm.h) instead of running here
};

// Slots a training job of `processes` ranks holds: its ranks share one slot's threads
// (threads_per_job / processes each, at least one), and a job with more ranks than that
// holds more slots, at most all of them.
int slots_for(int processes, const ServerConfig& config);

// What a dataset job does, in a server thread, with `job_dir` its directory: report progress
// in [0, 1], stop early when `cancelled` turns true; throws InputError / RuntimeError on
// failure.
using DatasetWork =
    std::function<void(const json& job, const std::string& job_dir, const std::function<void(double)>& progress,
                       const std::atomic<bool>& cancelled)>;

class Scheduler {
 public:
  Scheduler(Store& store, ServerConfig config, DatasetWork dataset_work);
  ~Scheduler();  // interrupts running jobs (they snapshot) and waits for them
  const ServerConfig& config() const { return config_; }

  // Queues a job document (kind "train" or "optimize": its net and solver text in
  // job["files"]; kind "dataset") after `prepare` (when given) has put anything else its
  // directory needs there; returns its id. When `prepare` throws, nothing is left.
  int64_t submit(json job, const std::function<void(const std::string& dir)>& prepare = {});
  // Each returns the job as it now is; ApiError-free: throws InputError when the job's
  // state does not allow it (the message says why).
  json abort(int64_t id);
  json resume(int64_t id);
  json clone(int64_t id);
  void remove(int64_t id);  // the job and its files; a running job is stopped first
  std::string job_dir(int64_t id) const;
  // Bumped whenever any job changes state (for watchers); wait_for_change sleeps until it
  // moves past `seen` or `timeout_ms` passes.
  uint64_t version() const { return version_.load(); }
  void wait_for_change(uint64_t seen, int timeout_ms);

 private:
  struct Running {
    std::string kind;  // the job's: "train", "optimize" or "dataset"
    pid_t pid = -1;
    bool ranks = false;  // pid is mpirun: interrupts go to its ranks
    std::thread thread;  // dataset jobs
    std::atomic<bool> cancel{false}, finished{false};
    std::string error;  // dataset jobs: why they failed
    bool abort_requested = false;
    double abort_time = 0;
    int slots = 1;            // slots_for its processes
    int attempt = 0;          // the job's attempts, this one included
    std::vector<std::vector<std::string>> next_steps;  // commands still to run after this one (deploy)
    std::string slurm_id;     // a job handed to Slurm
    std::string slurm_state;  // as squeue / sacct last said
    double slurm_polled = 0;
    int slurm_unknown = 0;  // polls in a row that found no trace of it
  };
  void loop();
  void start_job(json& job);
  void reap();
  void finish(int64_t id, const std::string& state, const std::string& reason, int exit_code);
  void touch();
  void stop_children();              // interrupts every running job and marks it failed (server stopping)
  void interrupt(const Running& r);  // asks a training job to snapshot and stop
  void kill_job(const Running& r);   // ends it at once
  std::vector<std::string> train_command(const json& job, int threads) const;
  std::vector<std::string> optimize_command(const json& job, int threads) const;
  std::vector<std::vector<std::string>> deploy_commands(const json& job, int threads) const;
  // Runs the job's next command; false (and the job failed) when it cannot be started.
  bool start_next_step(int64_t id, Running& r);
  void submit_to_slurm(json& job, Running& r);
  bool reap_slurm(int64_t id, Running& r);  // true when the job has ended
  int slots_in_use() const;

  Store& store_;
  ServerConfig config_;
  DatasetWork dataset_work_;
  std::mutex mu_;
  std::map<int64_t, std::unique_ptr<Running>> running_;
  UsageLog usage_;  // running local jobs' CPU and memory (under mu_)
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> version_{0};
  std::mutex change_mu_;
  std::condition_variable change_cv_;
  std::thread loop_;
};

double now_seconds();  // wall clock, seconds since the epoch

// What resuming a job of `kind` does, in words (appended to why it stopped).
std::string resume_note(const std::string& kind);

}  // namespace bks::server
