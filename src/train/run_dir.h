// The run directory contract (DESIGN.md): net.prototxt, solver.prototxt, run.json,
// metrics.jsonl, log.txt, snapshots/.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace bks {

// Creates `dir` and dir/snapshots; InputError when it cannot.
void make_run_dir(const std::string& dir);
std::string utc_timestamp();  // 20261130-041500

// Resuming at iteration `iter`: removes from metrics.jsonl what the resumed run writes again
// (records after `iter`, and the test at `iter`, which runs again first) and any line a
// kill left torn. Rewritten atomically; returns the number of lines dropped.
int drop_superseded_metrics(const std::string& path, int64_t iter);

// The snapshots of run directory `run` (run/snapshots/iter_<N>.<extension>: "safetensors"
// or "solverstate"), by iteration.
std::vector<std::pair<int64_t, std::string>> snapshot_files(const std::string& run, const std::string& extension);

// Keeps the newest `keep` snapshots (iter_N.safetensors + iter_N.solverstate) of run
// directory `run`; returns how many were deleted. keep <= 0 keeps all.
int prune_snapshots(const std::string& run, int keep);

// Appends one JSON object per line to metrics.jsonl, flushed as written.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace bks
