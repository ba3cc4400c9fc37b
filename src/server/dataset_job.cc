#include "server/dataset_job.h"

#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "server/process.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);

double read_progress(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return in ? last_progress(std::string(std::istreambuf_iterator<char>(in), {})) : -1;
}

// What the job reports when the child failed: its own error line (the message a reader
// gave, as when packing ran in the server), or what ended it when it never said.
std::string failure(int status, const std::string& tail) {
  std::string error;
  for (const auto& line : last_lines(tail, 40))
    if (line.rfind("error: ", 0) == 0) error = line.substr(7);
  if (WIFEXITED(status) && !error.empty()) return error;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return "bakusoku pack-dataset could not be started";
  return "packing " + exit_reason(status, tail);
}

}  // namespace

ProgressLog::ProgressLog(const std::string& file) : out_(file, std::ios::app) {}

void ProgressLog::operator()(double fraction) {
  // A new percent, or the end: at most a hundred lines, whatever the dataset's size.
  const auto percent = [](double f) { return static_cast<int>(std::floor(f * 100)); };
  if (!out_ || fraction <= last_ || (percent(fraction) == percent(last_) && fraction < 1)) return;
  last_ = fraction;
  out_ << fmt::format("{:.4f}\n", fraction) << std::flush;  // a failed write costs the bar, not the dataset
}

double last_progress(const std::string& text) {
  const size_t end = text.rfind('\n');  // the newest whole line ends here
  if (end == std::string::npos) return -1;
  const size_t before = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
  const size_t start = before == std::string::npos ? 0 : before + 1;
  const std::string line = text.substr(start, end - start);
  char* stop = nullptr;
  const double p = std::strtod(line.c_str(), &stop);
  return stop != line.c_str() && *stop == '\0' && p >= 0 && p <= 1 ? p : -1;
}

void pack_in_child(const PackRequest& r, const std::function<void(double)>& progress,
                   const std::atomic<bool>& cancelled) {
  const fs::path dir = r.job_dir;
  fs::create_directories(dir);
  const fs::path spec_file = dir / "spec.json", progress_file = dir / "progress", output = dir / "output.txt";
  std::ofstream(spec_file, std::ios::trunc) << r.spec.dump(1);
  std::error_code ec;
  fs::remove(progress_file, ec);
  std::vector<std::string> argv{r.binary, "pack-dataset", "--spec",     spec_file.string(),
                                "--out",  r.out_dir,      "--progress", progress_file.string()};
  for (const auto& root : r.roots) {
    argv.push_back("--import-root");
    argv.push_back(root);
  }
  std::ofstream(output, std::ios::app) << fmt::format("--- bakusoku serve: {}\n", fmt::join(argv, " "));
  const pid_t pid = spawn(argv, dir.string(), output.string());
  double reported = -1;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (cancelled) {
      kill(pid, SIGKILL);  // nothing to save: a half-packed dataset is packed again
      waitpid(pid, &status, 0);
      throw RuntimeError("cancelled");
    }
    const double p = read_progress(progress_file);
    if (p > reported && p < 1) progress(reported = p);
    std::this_thread::sleep_for(kPollInterval);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw RuntimeError(failure(status, tail_file(output.string())));
  progress(1.0);
}

}  // namespace bks::server
