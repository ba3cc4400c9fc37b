// Child processes of the dashboard: training runs as `bakusoku train` children whose output
// goes to a file, and what ended them, said in words.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace bks::server {

// Starts `argv` (argv[0] the program) in `dir` with stdout and stderr appended to
// `output_file`. The child is interrupted (SIGHUP: it snapshots and stops) if the server
// dies. Throws RuntimeError when it cannot be started.
pid_t spawn(const std::vector<std::string>& argv, const std::string& dir, const std::string& output_file);

// Runs `argv` (argv[0] found on PATH) to its end and returns its exit code and what it
// wrote (stdout and stderr together, at most `max_output` bytes kept); a command still
// running after `timeout_s` is killed (code 124). Code 127: it could not be started.
struct CommandResult {
  int code = 0;
  std::string output;
};
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s, size_t max_output = 1 << 20);

// Why a child ended, from its wait status and the end of its output: "" for success,
// otherwise a sentence (out of memory, killed, bad input at a line, ...).
std::string exit_reason(int wait_status, const std::string& output_tail);
// Whether the child stopped because it was asked to (SIGINT; bakusoku exits 130).
bool was_interrupted(int wait_status);

// The last `bytes` of a file, made printable (invalid bytes become '?'), for logs shown
// to people and put into JSON.
std::string tail_file(const std::string& path, size_t bytes = 4096);
std::vector<std::string> last_lines(const std::string& text, size_t n);

// CPU seconds used so far and resident memory (bytes) of a live process; false when gone.
bool process_usage(pid_t pid, double& cpu_seconds, double& rss_bytes);

// The live descendants of `root` (children, their children, ...), not `root` itself: the
// ranks under the mpirun of a multi-process job.
std::vector<pid_t> descendants(pid_t root);

// Sends `sig` to `root` and every descendant (a job's mpirun and its ranks: killing the
// launcher alone would leave ranks waiting on each other).
void signal_tree(pid_t root, int sig);

// CPU time and memory summed over `root` and its descendants (a job's mpirun and every
// rank), memory as each process's proportional share (pages the ranks share, such as one
// copy of the dataset, count once); `processes` receives how many were counted. False when
// `root` is gone.
bool process_tree_usage(pid_t root, double& cpu_seconds, double& rss_bytes, int* processes = nullptr);

}  // namespace bks::server
