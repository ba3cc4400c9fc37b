#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "profile/profiler.h"

namespace bks {

std::string format_duration(double s) {
  if (s < 0 || s > 1e7) return "--";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(bool enabled, int64_t max_iter, int64_t display_every, bool may_redraw)
    : enabled_(enabled),
      tty_(may_redraw && isatty(STDOUT_FILENO)),
      max_iter_(max_iter),
      display_every_(display_every) {}

void Progress::update(int64_t iter, float loss, float lr, double ips, double eta) {
  if (!enabled_) return;
  if (tty_) {
    double now = now_us();
    if (now - last_draw_ < 100000 && iter != max_iter_) return;
    last_draw_ = now;
    int width = static_cast<int>(std::to_string(max_iter_).size());
    std::printf("\r\033[2Kiter %*lld/%lld  loss %.4f  lr %.3g  %.0f %s/s  ETA %s", width, static_cast<long long>(iter),
                static_cast<long long>(max_iter_), loss, lr, ips, unit_.c_str(), format_duration(eta).c_str());
    std::fflush(stdout);
    drawn_ = true;
  } else if (display_every_ > 0 && iter % display_every_ == 0) {
    std::printf("iter %lld/%lld  loss %.4f  lr %.3g  %.0f %s/s  ETA %s\n", static_cast<long long>(iter),
                static_cast<long long>(max_iter_), loss, lr, ips, unit_.c_str(), format_duration(eta).c_str());
    std::fflush(stdout);
  }
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  if (tty_ && drawn_) std::printf("\r\033[2K");
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  drawn_ = false;
}

void Progress::finish() {
  if (enabled_ && tty_ && drawn_) std::printf("\n");
  drawn_ = false;
}

}  // namespace bks
