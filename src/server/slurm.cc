#include "server/slurm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "server/process.h"

namespace bks::server::slurm {

namespace {

constexpr double kCommandSeconds = 30;  // a controller that does not answer in this is down

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string first_line(const std::string& s) {
  std::string t = trimmed(s);
  return t.substr(0, t.find('\n'));
}

// "2:0" (exit code : signal) -> 2; a job ended by a signal reports 128 + signal.
int exit_code_of(const std::string& field) {
  int code = 0, sig = 0;
  if (std::sscanf(field.c_str(), "%d:%d", &code, &sig) < 1) return 0;
  return code != 0 ? code : sig != 0 ? 128 + sig : 0;
}

// "CANCELLED by 0" -> "CANCELLED".
std::string state_word(const std::string& s) { return trimmed(s).substr(0, trimmed(s).find(' ')); }

}  // namespace

std::string batch_script(const BatchJob& job) {
  std::string s = "#!/bin/sh\n# Written by bakusoku serve: one training job, one Slurm task per rank.\n";
  s += fmt::format("#SBATCH --job-name={}\n", shell_word(job.name));
  s += fmt::format("#SBATCH --ntasks={}\n#SBATCH --cpus-per-task={}\n", job.tasks, job.cpus_per_task);
  s += fmt::format("#SBATCH --chdir={}\n", shell_word(job.dir));
  s += fmt::format("#SBATCH --output={}\n#SBATCH --open-mode=append\n", shell_word(job.dir + "/output.txt"));
  // srun starts the ranks (Open MPI takes rank and size from PMIx); one that fails ends the
  // others at once instead of leaving them waiting in a collective.
  s += "exec srun --mpi=pmix --kill-on-bad-exit=1";
  for (const std::string& a : job.train) {
    s.push_back(' ');
    s += shell_word(a);
  }
  s.push_back('\n');
  return s;
}

void check_cluster() {
  for (const char* tool : {"sbatch", "squeue", "scancel", "sacct", "scontrol", "sinfo"})
    if (find_on_path(tool).empty())
      input_error("--scheduler slurm: '{}' is not on PATH; install Slurm's client commands (Debian slurm-client)",
                  tool);
  // Slurm's commands wait a minute for a configuration file that is not there.
  const char* conf = std::getenv("SLURM_CONF");
  if (conf && *conf && access(conf, R_OK) != 0)
    input_error("--scheduler slurm: SLURM_CONF names {}, which cannot be read ({})", conf, std::strerror(errno));
  CommandResult r = run_command({"sinfo", "-h", "-o", "%P %a %D"}, 2 * kCommandSeconds + 30);
  if (r.code != 0)
    input_error("--scheduler slurm: the Slurm controller does not answer (sinfo: {})", first_line(r.output));
  if (trimmed(r.output).empty()) input_error("--scheduler slurm: the Slurm cluster has no partition (sinfo)");
}

std::string submit(const std::string& script_file) {
  CommandResult r = run_command({"sbatch", "--parsable", script_file}, kCommandSeconds);
  std::string out = first_line(r.output);
  // --parsable: "ID" or "ID;cluster".
  std::string id = out.substr(0, out.find(';'));
  if (r.code != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    runtime_error("sbatch refused the job: {}", out.empty() ? fmt::format("exit code {}", r.code) : out);
  return id;
}

JobState query(const std::string& id) {
  JobState s;
  // While Slurm holds the job: squeue.
  CommandResult q = run_command({"squeue", "-h", "-j", id, "-o", "%T"}, kCommandSeconds);
  if (q.code == 0 && !trimmed(q.output).empty()) {
    s.known = s.active = true;
    s.state = first_line(q.output);
    if (s.state != "COMPLETED" && s.state != "FAILED" && s.state != "CANCELLED" && s.state != "TIMEOUT" &&
        s.state != "NODE_FAIL" && s.state != "OUT_OF_MEMORY" && s.state != "PREEMPTED")
      return s;
  }
  // After it: the accounting records (the allocation's line, -X), or on a cluster without
  // an accounting database the job completion file (-c), ...
  for (bool completion_file : {false, true}) {
    std::vector<std::string> argv{"sacct", "-n", "-P", "-j", id, "-o", "State,ExitCode"};
    argv.push_back(completion_file ? "-c" : "-X");
    CommandResult a = run_command(argv, kCommandSeconds);
    if (a.code != 0 || trimmed(a.output).empty()) continue;
    std::string line = first_line(a.output);
    auto bar = line.find('|');
    s.known = true;
    s.active = false;
    s.state = state_word(line.substr(0, bar));
    s.exit_code = bar == std::string::npos ? 0 : exit_code_of(line.substr(bar + 1));
    if (s.state != "PENDING" && s.state != "RUNNING" && s.state != "REQUEUED" && s.state != "SUSPENDED") return s;
  }
  // ... or, on a cluster without accounting, the controller's record of a recent job.
  CommandResult c = run_command({"scontrol", "-o", "show", "job", id}, kCommandSeconds);
  if (c.code == 0) {
    std::istringstream in(c.output);
    for (std::string kv; in >> kv;) {
      if (kv.rfind("JobState=", 0) == 0) s.state = kv.substr(9);
      if (kv.rfind("ExitCode=", 0) == 0) s.exit_code = exit_code_of(kv.substr(9));
    }
    if (!s.state.empty()) {
      s.known = true;
      s.active = s.state == "PENDING" || s.state == "RUNNING" || s.state == "CONFIGURING" || s.state == "COMPLETING" ||
                 s.state == "SUSPENDED" || s.state == "REQUEUED";
    }
  }
  return s;
}

void cancel(const std::string& id, const std::string& signal) {
  std::vector<std::string> argv{"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(id);
  CommandResult r = run_command(argv, kCommandSeconds);
  if (r.code != 0) runtime_error("scancel {}: {}", id, first_line(r.output));
}

}  // namespace bks::server::slurm
