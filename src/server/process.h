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

}  // namespace bks::server
