// The run directory contract (DESIGN.md): net.prototxt, solver.prototxt, run.json,
// metrics.jsonl, log.txt, snapshots/.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace bks {

// Creates `dir` and dir/snapshots; InputError when it cannot.
void make_run_dir(const std::string& dir);
std::string utc_timestamp();  // 20261130-041500

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
