// Packing a dataset from the dashboard, in a child process: a crafted or broken source file
// can at worst end that child, never the server. The child is `bakusoku pack-dataset`
// (a hidden verb) run like a training job: output into the job's output.txt, progress into a
// file the server polls, killed when the job is aborted or the server stops.
#pragma once

#include <atomic>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "server/store.h"

namespace bks::server {

struct PackRequest {
  std::string binary;              // bakusoku itself
  json spec;                       // what validate_dataset_spec returned
  std::string out_dir;             // the dataset's folder
  std::vector<std::string> roots;  // the folders its files may come from
  std::string job_dir;             // spec.json, progress and output.txt go here
};

// Runs the child and waits for it, reporting its progress. Throws RuntimeError with the
// child's own error line (or, when it crashed, what ended it) when it fails, and
// RuntimeError("cancelled") after killing it when `cancelled` turns true.
void pack_in_child(const PackRequest& request, const std::function<void(double)>& progress,
                   const std::atomic<bool>& cancelled);

// The child's side of the progress file: one line per step of at least a percent ("0.42"),
// appended (the newest line is the progress; a line not yet whole is not read), and the
// last, 1. A hundred lines at most, so the server reads the whole file each time.
class ProgressLog {
 public:
  explicit ProgressLog(const std::string& file);
  void operator()(double fraction);

 private:
  std::ofstream out_;
  double last_ = -1;
};

// The fraction on the newest whole line of such a file's `text`; -1 when it has none.
double last_progress(const std::string& text);

}  // namespace bks::server
