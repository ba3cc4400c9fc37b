#include "server/usage_log.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "server/process.h"

namespace bks::server {

void UsageLog::sample(int64_t id, pid_t pid, int attempt, const std::string& job_dir, double now) {
  Last& l = last_[id];
  if (l.first < 0) l.first = now;
  const double interval = std::max(1.0, (now - l.first) / 600);
  if (now - l.at < interval) return;
  double cpu = 0, rss = 0;
  int processes = 0;
  if (!process_tree_usage(pid, cpu, rss, &processes)) return;
  // A rank that ended takes its CPU time out of the sum: no negative use. The first
  // measurement of an attempt has nothing to compare with.
  const double percent = l.cpu >= 0 && now > l.cpu_at ? std::max(0.0, 100.0 * (cpu - l.cpu) / (now - l.cpu_at)) : 0.0;
  l.at = now;
  l.cpu = cpu;
  l.cpu_at = now;
  const nlohmann::json line{
      {"time", now}, {"cpu_percent", percent}, {"rss_mb", rss / 1e6}, {"processes", processes}, {"attempt", attempt}};
  std::ofstream(std::filesystem::path(job_dir) / kUsageFile, std::ios::app) << line.dump() << '\n';
}

void UsageLog::forget(int64_t id) { last_.erase(id); }

}  // namespace bks::server
