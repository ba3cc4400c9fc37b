#include "server/jobs.h"

#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "server/fine_tune.h"
#include "server/process.h"
#include "server/slurm.h"

namespace bks::server {

namespace fs = std::filesystem;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

constexpr double kAbortGraceSeconds = 20;  // SIGINT first (snapshot), SIGKILL after this
constexpr double kSlurmPollSeconds = 2;    // squeue / sacct per Slurm job, at most this often
constexpr int kSlurmUnknownPolls = 5;      // then a job no Slurm command knows has failed
constexpr int kPackingSlots = 1;           // datasets packed at once, besides the job slots

}  // namespace

std::string resume_note(const std::string& kind) {
  return kind == "optimize" ? "resume starts the search again"
         : kind == "deploy" ? "resume deploys again"
                            : "resume continues from its last snapshot";
}

int slots_for(int processes, const ServerConfig& config) {
  const int per_slot = std::max(1, config.threads_per_job);
  return std::clamp((std::max(1, processes) + per_slot - 1) / per_slot, 1, std::max(1, config.slots));
}

Scheduler::Scheduler(Store& store, ServerConfig config, DatasetWork dataset_work)
    : store_(store), config_(std::move(config)), dataset_work_(std::move(dataset_work)) {
  fs::create_directories(fs::path(config_.data_dir) / "jobs");
  // A server that stopped left these without a process: say so, and let them resume.
  for (json& job : store_.list("jobs")) {
    const std::string state = job.value("state", "");
    if (state != "running" && state != "new") continue;
    if (state == "running" && config_.slurm && job.contains("slurm_id")) {
      // Slurm ran it on without us: follow it again.
      auto r = std::make_unique<Running>();
      r->slurm_id = job["slurm_id"].get<std::string>();
      r->slurm_state = job.value("slurm_state", "");
      running_[job["id"].get<int64_t>()] = std::move(r);
      continue;
    }
    job["state"] = "failed";
    job["finished"] = now_seconds();
    job["reason"] = state == "new" ? "the server stopped while it created this job; clone it to try again"
                                   : "the server stopped while this job ran; " + resume_note(job.value("kind", ""));
    job.erase("pid");
    store_.put("jobs", job);
  }
  loop_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  // Children first, while the thread that started them lives (when it ends they get their
  // death signal too; harmless, but the stop is ours to report).
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_children();
  }
  stop_ = true;
  change_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void Scheduler::stop_children() {
  // Jobs in Slurm run on without the server (the next one follows them again).
  for (auto it = running_.begin(); it != running_.end();)
    it = it->second->slurm_id.empty() ? std::next(it) : running_.erase(it);
  for (auto& [id, r] : running_) interrupt(*r);  // each trainer snapshots and stops
  for (auto& [id, r] : running_) {
    if (r->pid > 0) {
      int st = 0;
      waitpid(r->pid, &st, 0);
    }
    r->cancel = true;
    if (r->thread.joinable()) r->thread.join();
    if (auto job = store_.get("jobs", id)) {
      (*job)["state"] = "failed";
      (*job)["finished"] = now_seconds();
      (*job)["reason"] = "the server stopped while this job ran; " + resume_note(r->kind);
      job->erase("pid");
      store_.put("jobs", *job);
    }
  }
  running_.clear();
}

int Scheduler::slots_in_use() const {
  int used = 0;
  for (const auto& [id, r] : running_)
    if (r->slurm_id.empty() && r->kind != "dataset") used += r->slots;  // jobs in Slurm run on its nodes
  return used;
}

void Scheduler::interrupt(const Running& r) {
  if (!r.slurm_id.empty()) {
    try {
      // A job still waiting for its allocation has no task to signal: it is cancelled.
      slurm::cancel(r.slurm_id, r.slurm_state == "PENDING" ? "" : "INT");
    } catch (const RuntimeError& e) {
      log::warn("{}", e.what());
    }
    return;
  }
  if (r.pid <= 0) return;
  // SIGINT to the child (a trainer snapshots and stops; optimize stops, and a fine-tune it
  // runs gets its death signal) or, under mpirun, to every rank but not to mpirun: each
  // rank snapshots (rank 0 writes), they agree to stop, and mpirun ends with their exit
  // code (130). mpirun itself would take SIGINT as "abort the job" and exit 1.
  const std::vector<pid_t> ranks = r.ranks ? descendants(r.pid) : std::vector<pid_t>{};
  if (ranks.empty()) kill(r.pid, SIGINT);
  for (pid_t p : ranks) kill(p, SIGINT);
}

void Scheduler::kill_job(const Running& r) {
  if (!r.slurm_id.empty()) {
    try {
      slurm::cancel(r.slurm_id);
    } catch (const RuntimeError& e) {
      log::warn("{}", e.what());
    }
  } else if (r.pid > 0) {
    signal_tree(r.pid, SIGKILL);
  }
}

std::string Scheduler::job_dir(int64_t id) const {
  return (fs::path(config_.data_dir) / "jobs" / std::to_string(id)).string();
}

void Scheduler::touch() {
  ++version_;
  change_cv_.notify_all();
}

void Scheduler::wait_for_change(uint64_t seen, int timeout_ms) {
  std::unique_lock<std::mutex> lock(change_mu_);
  change_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return version_.load() != seen || stop_.load(); });
}

int64_t Scheduler::submit(json job, const std::function<void(const std::string& dir)>& prepare) {
  json files = job.value("files", json::object());
  job.erase("files");
  job["state"] = "new";  // not yet "queued": the scheduler must not start it before its files exist
  job["created"] = now_seconds();
  job["attempts"] = 0;
  int64_t id = store_.insert("jobs", job);
  fs::create_directories(job_dir(id));
  for (auto& [name, text] : files.items()) std::ofstream(fs::path(job_dir(id)) / name) << text.get<std::string>();
  if (prepare) {
    try {
      prepare(job_dir(id));
    } catch (...) {
      store_.remove("jobs", id);
      std::error_code ec;
      fs::remove_all(job_dir(id), ec);
      throw;
    }
  }
  job["state"] = "queued";
  store_.put("jobs", job);
  touch();
  return id;
}

std::vector<std::string> Scheduler::train_command(const json& job, int threads) const {
  const fs::path dir = job_dir(job["id"].get<int64_t>());
  std::vector<std::string> argv{config_.binary,
                                "train",
                                "--solver",
                                (dir / "solver.prototxt").string(),
                                "--out",
                                (dir / "run").string(),
                                "--threads",
                                std::to_string(threads),
                                "--keep-snapshots",
                                std::to_string(job.value("keep_snapshots", 5))};
  // The job's batch size is the batch of all its ranks together, so epochs mean what they say.
  if (job.value("processes", 1) > 1) argv.push_back("--global-batch");
  std::string from = job.value("resume_from", "");
  if (!from.empty())
    argv.insert(argv.end(), {"--snapshot", from});
  else if (job.contains("weights_from"))  // fine-tuning; a resized classifier starts afresh
    argv.insert(argv.end(), {"--weights", (dir / job.value("init_weights", fine_tune_file_name(""))).string(),
                             "--reinit-mismatched"});
  return argv;
}

std::vector<std::string> Scheduler::optimize_command(const json& job, int threads) const {
  const fs::path dir = job_dir(job["id"].get<int64_t>());
  const json& spec = job.at("spec");
  std::vector<std::string> argv{config_.binary,
                                "optimize",
                                "--model",
                                (dir / "net.prototxt").string(),
                                "--weights",
                                (dir / "weights.safetensors").string(),
                                "--objective",
                                spec.at("objective").get<std::string>(),
                                "--max-accuracy-drop",
                                fmt::format("{}", spec.at("max_accuracy_drop").get<double>()),
                                "--budget-minutes",
                                fmt::format("{}", spec.at("budget_minutes").get<double>()),
                                "--threads",
                                std::to_string(threads),
                                "-o",
                                (dir / "best.bks").string()};
  if (spec.value("allow_training", false))
    argv.insert(argv.end(), {"--allow-training", "--solver", (dir / "solver.prototxt").string(),
                             "--fine-tune-iterations", std::to_string(spec.at("fine_tune_iterations").get<int64_t>())});
  return argv;
}

std::vector<std::vector<std::string>> Scheduler::deploy_commands(const json& job, int threads) const {
  const fs::path dir = job_dir(job["id"].get<int64_t>());
  const std::string precision = job.at("spec").at("precision").get<std::string>();
  const std::string bundle = (dir / "model.bks").string();
  std::vector<std::string> deploy{config_.binary, "deploy",
                                  "--model",      (dir / "net.prototxt").string(),
                                  "--weights",    (dir / "weights.safetensors").string(),
                                  "--precision",  precision,
                                  "--threads",    std::to_string(threads),
                                  "-o",           bundle};
  if (precision == "int8") deploy.insert(deploy.end(), {"--calib", "test"});  // the job's validation set
  return {deploy,
          {config_.binary, "bench", bundle, "--batch", "1,64", "--iterations", "50", "--threads",
           std::to_string(threads), "--report", (dir / "bench.json").string()}};
}

bool Scheduler::start_next_step(int64_t id, Running& r) {
  const fs::path dir = job_dir(id);
  const std::vector<std::string> argv = r.next_steps.front();
  r.next_steps.erase(r.next_steps.begin());
  std::ofstream((dir / "output.txt").string(), std::ios::app)
      << fmt::format("--- bakusoku serve: next: {}\n", fmt::join(argv, " "));
  try {
    r.pid = spawn(argv, dir.string(), (dir / "output.txt").string());
  } catch (const std::exception& e) {
    finish(id, "failed", e.what(), 1);
    return false;
  }
  if (auto job = store_.get("jobs", id)) {
    (*job)["pid"] = r.pid;
    store_.put("jobs", *job);
  }
  return true;
}

void Scheduler::submit_to_slurm(json& job, Running& r) {
  const int64_t id = job["id"].get<int64_t>();
  const int processes = job.value("processes", 1);
  slurm::BatchJob b;
  b.name = fmt::format("bakusoku-{}", id);
  b.dir = job_dir(id);
  b.tasks = processes;
  b.cpus_per_task = std::max(1, config_.threads_per_job / processes);
  b.train = train_command(job, b.cpus_per_task);
  const fs::path script = fs::path(b.dir) / "job.sbatch";
  std::ofstream(script) << slurm::batch_script(b);
  std::ofstream(fs::path(b.dir) / "output.txt", std::ios::app)
      << fmt::format("--- bakusoku serve: attempt {}: sbatch {}\n", job.value("attempts", 0) + 1, script.string());
  r.slurm_id = slurm::submit(script.string());
  r.slurm_state = "PENDING";
  job["slurm_id"] = r.slurm_id;
  job["slurm_state"] = r.slurm_state;
}

bool Scheduler::reap_slurm(int64_t id, Running& r) {
  const double now = now_seconds();
  if (now - r.slurm_polled < kSlurmPollSeconds) return false;
  r.slurm_polled = now;
  const slurm::JobState s = slurm::query(r.slurm_id);
  if (!s.known) {
    if (++r.slurm_unknown < kSlurmUnknownPolls) return false;
    finish(id, "failed", fmt::format("Slurm no longer knows its job {} (squeue, sacct and scontrol)", r.slurm_id), -1);
    return true;
  }
  r.slurm_unknown = 0;
  if (s.active) {
    if (s.state != r.slurm_state) {
      r.slurm_state = s.state;
      if (auto job = store_.get("jobs", id)) {
        (*job)["slurm_state"] = s.state;
        store_.put("jobs", *job);
        touch();
      }
    }
    if (r.abort_requested && now - r.abort_time > kAbortGraceSeconds) kill_job(r);
    return false;
  }
  if (auto job = store_.get("jobs", id)) {
    (*job)["slurm_state"] = s.state;
    store_.put("jobs", *job);
  }
  const std::string tail = tail_file((fs::path(job_dir(id)) / "output.txt").string(), 8192);
  if (r.abort_requested && (s.exit_code == 130 || s.state == "CANCELLED"))
    finish(id, "aborted", "aborted on request; resume continues from its last snapshot", s.exit_code);
  else if (s.state == "COMPLETED" && s.exit_code == 0)
    finish(id, "done", "", 0);
  else if (s.exit_code == 0)
    finish(id, "failed", fmt::format("Slurm job {} ended {}", r.slurm_id, s.state), 0);
  else  // the tasks' own exit code, read as the local reasons read a child's
    finish(id, "failed",
           fmt::format("Slurm job {} {}: {}", r.slurm_id, s.state, exit_reason((s.exit_code & 0xff) << 8, tail)),
           s.exit_code);
  return true;
}

void Scheduler::start_job(json& job) {
  const int64_t id = job["id"].get<int64_t>();
  auto r = std::make_unique<Running>();
  r->kind = job.value("kind", "");
  const fs::path dir = job_dir(id);
  if (r->kind == "train" && config_.slurm) {
    submit_to_slurm(job, *r);
  } else if (r->kind == "train" || r->kind == "optimize" || r->kind == "deploy") {
    std::vector<std::string> argv;
    if (r->kind == "deploy") {
      // Two commands, one after the other: the bundle, then its figures.
      auto steps = deploy_commands(job, std::max(1, config_.threads_per_job));
      argv = steps.front();
      r->next_steps.assign(steps.begin() + 1, steps.end());
    } else if (r->kind == "optimize") {
      // Here even under Slurm: it reads the source job's files and measures this machine.
      argv = optimize_command(job, std::max(1, config_.threads_per_job));
    } else {
      const int processes = job.value("processes", 1);
      r->slots = slots_for(processes, config_);
      argv = train_command(job, std::max(1, config_.threads_per_job / processes));
      if (processes > 1) {
        // Its ranks share the machine with other jobs: unpinned unless alone.
        argv.insert(argv.end(), {"--ranks", std::to_string(processes)});
        if (config_.slots > 1) argv.push_back("--no-pin");
        r->ranks = true;
      }
    }
    std::ofstream((dir / "output.txt").string(), std::ios::app)
        << fmt::format("--- bakusoku serve: attempt {}: {}\n", job.value("attempts", 0) + 1, fmt::join(argv, " "));
    r->pid = spawn(argv, dir.string(), (dir / "output.txt").string());
    job["pid"] = r->pid;
  } else {
    Running* raw = r.get();
    json copy = job;
    r->thread = std::thread([this, raw, copy, id, dir] {
      double last = 0;
      auto progress = [&](double p) {
        double t = now_seconds();
        if (t - last < 0.25 && p < 1) return;  // the store is not a progress bar
        last = t;
        if (auto j = store_.get("jobs", id)) {
          (*j)["progress"] = p;
          store_.put("jobs", *j);
          touch();
        }
      };
      try {
        dataset_work_(copy, dir.string(), progress, raw->cancel);
      } catch (const std::exception& e) {
        raw->error = e.what();
      }
      raw->finished = true;
      touch();
    });
  }
  job["state"] = "running";
  job["started"] = now_seconds();
  job["attempts"] = job.value("attempts", 0) + 1;
  r->attempt = job["attempts"];
  job.erase("reason");
  store_.put("jobs", job);
  running_[id] = std::move(r);
  log::info("job {} ({}) started", id, job.value("name", ""));
}

void Scheduler::finish(int64_t id, const std::string& state, const std::string& reason, int exit_code) {
  auto job = store_.get("jobs", id);
  if (!job) return;
  (*job)["state"] = state;
  (*job)["finished"] = now_seconds();
  (*job)["exit_code"] = exit_code;
  // Time run, every attempt together (each attempt's `started` replaces the last one's).
  if (job->contains("started") && (*job)["started"].is_number())
    (*job)["run_seconds"] = job->value("run_seconds", 0.0) +
                            std::max(0.0, (*job)["finished"].get<double>() - (*job)["started"].get<double>());
  if (reason.empty())
    job->erase("reason");
  else
    (*job)["reason"] = reason;
  std::string tail = tail_file((fs::path(job_dir(id)) / "output.txt").string(), 8192);
  (*job)["log_tail"] = last_lines(tail, 20);
  job->erase("pid");
  if (state == "done") (*job)["progress"] = 1.0;
  store_.put("jobs", *job);
  log::info("job {} {}{}", id, state, reason.empty() ? "" : ": " + reason);
}

void Scheduler::reap() {
  for (auto it = running_.begin(); it != running_.end();) {
    const int64_t id = it->first;
    Running& r = *it->second;
    bool ended = false;
    if (!r.slurm_id.empty()) {
      ended = reap_slurm(id, r);
    } else if (r.pid > 0) {
      int st = 0;
      if (waitpid(r.pid, &st, WNOHANG) == r.pid) {
        ended = true;
        std::string tail = tail_file((fs::path(job_dir(id)) / "output.txt").string(), 8192);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        if (r.abort_requested && (was_interrupted(st) || WIFSIGNALED(st))) {
          finish(id, "aborted", "aborted on request; " + resume_note(r.kind), code);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !r.next_steps.empty() && !r.abort_requested) {
          ended = !start_next_step(id, r);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
          finish(id, "done", "", 0);
        } else {
          finish(id, "failed", exit_reason(st, tail), code);
        }
      } else if (r.abort_requested && now_seconds() - r.abort_time > kAbortGraceSeconds) {
        kill_job(r);
      }
    } else if (r.finished) {
      ended = true;
      r.thread.join();
      if (r.cancel)
        finish(id, "aborted", "aborted on request", 0);
      else if (!r.error.empty())
        finish(id, "failed", r.error, 1);
      else
        finish(id, "done", "", 0);
    }
    if (ended) {
      usage_.forget(id);
      it = running_.erase(it);
      touch();
    } else {
      ++it;
    }
  }
}

void Scheduler::loop() {
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reap();
      const double now = now_seconds();
      for (const auto& [id, r] : running_)
        if (r->pid > 0 && r->slurm_id.empty()) usage_.sample(id, r->pid, r->attempt, job_dir(id), now);
      // Training and optimize jobs share the slots, first come, first served: a job waits
      // for the slots it needs, and those after it wait behind it (a big job is not starved
      // by small ones). (Slurm queues training jobs itself: they go to it at once.) Packing
      // a dataset has a slot of its own: a new dataset is ready while training fills the rest.
      bool held_back = false;
      for (json& job : store_.list("jobs")) {
        if (job.value("state", "") != "queued") continue;
        const std::string kind = job.value("kind", "");
        if (kind == "dataset") {
          const auto packing = std::count_if(running_.begin(), running_.end(),
                                             [](const auto& r) { return r.second->kind == "dataset"; });
          if (packing >= kPackingSlots) continue;
        } else {
          const bool train = kind == "train";
          const int needs = train ? slots_for(job.value("processes", 1), config_) : 1;
          held_back = held_back || (!(train && config_.slurm) && slots_in_use() + needs > config_.slots);
          if (held_back) continue;
        }
        try {
          start_job(job);
        } catch (const std::exception& e) {
          job["state"] = "failed";
          job["reason"] = e.what();
          store_.put("jobs", job);
        }
        touch();
      }
    }
    std::unique_lock<std::mutex> lock(change_mu_);
    change_cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

json Scheduler::abort(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = store_.get("jobs", id);
  if (!job) input_error("no job {}", id);
  std::string state = job->value("state", "");
  if (state == "queued") {
    (*job)["state"] = "aborted";
    (*job)["reason"] = "aborted before it started";
    (*job)["finished"] = now_seconds();
    store_.put("jobs", *job);
  } else if (state == "running" && running_.count(id)) {
    Running& r = *running_[id];
    r.abort_requested = true;
    r.abort_time = now_seconds();
    r.cancel = true;
    interrupt(r);
  } else {
    input_error("job {} is {}; only queued or running jobs can be aborted", id, state);
  }
  touch();
  return *store_.get("jobs", id);
}

json Scheduler::resume(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = store_.get("jobs", id);
  if (!job) input_error("no job {}", id);
  std::string state = job->value("state", "");
  if (state != "aborted" && state != "failed")
    input_error("job {} is {}; only aborted or failed jobs can be resumed", id, state);
  std::string from;
  int64_t from_iter = -1;
  if (job->value("kind", "") == "train") {
    auto states = snapshot_files((fs::path(job_dir(id)) / "run").string(), "solverstate");
    if (!states.empty()) std::tie(from_iter, from) = states.back();
  }
  (*job)["resume_from"] = from;
  (*job)["state"] = "queued";
  job->erase("finished");  // the aborted attempt's, not this one's
  if (from_iter >= 0) {    // where the charts mark the new attempt
    json& resumes = (*job)["resumes"];
    if (!resumes.is_array()) resumes = json::array();
    resumes.push_back({{"iter", from_iter}, {"time", now_seconds()}});
  }
  (*job)["reason"] = job->value("kind", "") == "optimize" ? "starts the search again"
                     : from.empty()                       ? "no snapshot yet: starts from the beginning"
                                                          : "resumes from " + fs::path(from).filename().string();
  if (from.empty() && job->value("kind", "") == "train") fs::remove_all(fs::path(job_dir(id)) / "run");
  store_.put("jobs", *job);
  touch();
  return *job;
}

json Scheduler::clone(int64_t id) {
  auto job = store_.get("jobs", id);
  if (!job) input_error("no job {}", id);
  json copy;
  for (const char* k : {"kind", "name", "model_id", "dataset_id", "group", "params", "max_iter", "spec", "processes"})
    if (job->contains(k)) copy[k] = (*job)[k];
  copy["name"] = job->value("name", "job") + " (clone)";
  copy["cloned_from"] = id;
  json files = json::object();
  for (const char* f : {"net.prototxt", "solver.prototxt"}) {
    std::ifstream in(fs::path(job_dir(id)) / f);
    if (in) files[f] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  copy["files"] = files;
  int64_t nid = submit(copy);
  return *store_.get("jobs", nid);
}

void Scheduler::remove(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!store_.get("jobs", id)) input_error("no job {}", id);
    auto it = running_.find(id);
    if (it != running_.end()) {
      Running& r = *it->second;
      kill_job(r);
      if (r.pid > 0) {
        int st = 0;
        waitpid(r.pid, &st, 0);
      }
      r.cancel = true;
      if (r.thread.joinable()) r.thread.join();
      running_.erase(it);
    }
    store_.remove("jobs", id);
  }
  std::error_code ec;
  fs::remove_all(job_dir(id), ec);
  touch();
}

}  // namespace bks::server
