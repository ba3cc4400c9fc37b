#include "train/run_dir.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_io.h"

namespace bks {

void make_run_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir) / "snapshots", ec);
  if (ec) input_error("{}: cannot create run directory ({})", dir, ec.message());
}

int drop_superseded_metrics(const std::string& path, int64_t iter) {
  if (!std::filesystem::exists(path)) return 0;
  std::istringstream in(read_file(path, "metrics file"));
  std::string kept, line;
  int dropped = 0;
  while (std::getline(in, line)) {
    nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    const bool whole =
        !in.eof() && !r.is_discarded() && r.is_object() && r.contains("iter") && r["iter"].is_number_integer();
    const int64_t at = whole ? r["iter"].get<int64_t>() : 0;
    if (!whole || at > iter || (at == iter && r.value("phase", "") == "test")) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped) write_file_atomic(path, kept);
  return dropped;
}

int prune_snapshots(const std::string& dir, int keep) {
  if (keep <= 0) return 0;
  std::vector<int64_t> iters;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int64_t n = 0;
    const char* first = name.c_str() + 5;
    const char* last = name.c_str() + name.size();
    if (name.rfind("iter_", 0) != 0 || name.size() < 17 || name.substr(name.size() - 12) != ".solverstate") continue;
    auto [end, err] = std::from_chars(first, last, n);
    if (err == std::errc() && end == last - 12) iters.push_back(n);
  }
  if (static_cast<int>(iters.size()) <= keep) return 0;
  std::sort(iters.begin(), iters.end());
  int removed = 0;
  for (size_t i = 0; i + keep < iters.size(); ++i) {
    // The state first: a weights file without its state is never mistaken for a snapshot.
    const auto base = std::filesystem::path(dir) / fmt::format("iter_{}", iters[i]);
    std::filesystem::remove(base.string() + ".solverstate", ec);
    std::filesystem::remove(base.string() + ".safetensors", ec);
    ++removed;
  }
  return removed;
}

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

MetricsWriter::MetricsWriter(const std::string& path) {
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) runtime_error("{}: cannot open for writing", path);
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace bks
