#include "train/run_dir.h"

#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace bks {

void make_run_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir) / "snapshots", ec);
  if (ec) input_error("{}: cannot create run directory ({})", dir, ec.message());
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
