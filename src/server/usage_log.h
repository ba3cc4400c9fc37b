// Each running job's CPU use and memory, measured by the scheduler whether or not anyone
// watches and appended to <job dir>/usage.jsonl, so a page opened later, or after a resume,
// draws the job's whole history (the event stream replays the file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace bks::server {

constexpr const char* kUsageFile = "usage.jsonl";

class UsageLog {
 public:
  // Appends {"time", "cpu_percent", "rss_mb", "processes", "attempt"} for the process tree
  // under `pid` (a job's child, or its mpirun and ranks) when the job's sampling interval has
  // passed since its last line. The interval grows with the job's age (1 s in its first ten
  // minutes, then a six-hundredth of its age), so a run of days keeps a file of thousands
  // of lines, not hundreds of thousands.
  void sample(int64_t id, pid_t pid, int attempt, const std::string& job_dir, double now);
  void forget(int64_t id);  // the job has ended

 private:
  struct Last {
    double first = -1, at = 0, cpu = -1, cpu_at = 0;
  };
  std::map<int64_t, Last> last_;
};

}  // namespace bks::server
