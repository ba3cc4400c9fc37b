// A program run as a filter: text in on its standard input, text out from its standard
// output, bounded in time and in size (the dashboard draws networks with Graphviz's `dot`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bks::server {

struct FilterResult {
  enum class End {
    exited,     // ran to its end: see `code`
    not_found,  // argv[0] is not on PATH (or cannot be executed)
    timed_out,  // still running after the time limit: killed
    too_large,  // wrote more than the output limit: killed
  };
  End end = End::exited;
  int code = 0;        // exit code (128 + signal when a signal ended it)
  std::string output;  // its standard output
  std::string errors;  // the start of its standard error
};

// Runs `argv` (argv[0] found on PATH; no shell) with `input` as its standard input and
// returns what it wrote. Killed (SIGKILL) when it runs past `timeout_s` seconds or writes
// more than `max_output` bytes. Throws RuntimeError only when no process can be made.
FilterResult run_filter(const std::vector<std::string>& argv, std::string_view input, double timeout_s,
                        size_t max_output);

}  // namespace bks::server
