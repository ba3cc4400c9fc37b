#include "train/run_dir.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <regex>
#include <sstream>
#include <vector>

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

std::vector<std::pair<int64_t, std::string>> snapshot_files(const std::string& run, const std::string& extension) {
  std::vector<std::pair<int64_t, std::string>> out;
  const std::regex name("iter_(\\d+)\\." + extension);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(run) / "snapshots", ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (!std::regex_match(f, m, name)) continue;
    // A number too large for an iteration is no snapshot of ours (and must not throw).
    int64_t iter = 0;
    const std::string digits = m[1];
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), iter);
    if (err == std::errc() && end == digits.data() + digits.size()) out.emplace_back(iter, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int prune_snapshots(const std::string& run, int keep) {
  if (keep <= 0) return 0;
  const auto states = snapshot_files(run, "solverstate");
  int removed = 0;
  std::error_code ec;
  for (size_t i = 0; i + keep < states.size(); ++i) {
    // The state first: a weights file without its state is never mistaken for a snapshot.
    std::filesystem::remove(states[i].second, ec);
    std::filesystem::remove(std::filesystem::path(states[i].second).replace_extension(".safetensors"), ec);
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
