// Training progress on stdout: one line redrawn in place on a terminal, plain periodic
// lines otherwise; test results always as their own lines.
#pragma once

#include <string>

namespace bks {

class Progress {
 public:
  // `may_redraw` false: periodic lines even on a terminal (under mpirun stdout is always a
  // pseudo-terminal, whatever mpirun's own output goes to).
  Progress(bool enabled, int64_t max_iter, int64_t display_every, bool may_redraw = true);
  // Called every iteration; draws when due.
  void update(int64_t iter, float loss, float lr, double images_per_s, double eta_s);
  // A line that must stay (test results, messages).
  void line(const std::string& text);
  void finish();
  // What the throughput counts: "img" (the default), "characters", ...
  void set_unit(std::string unit) { unit_ = std::move(unit); }

 private:
  bool enabled_, tty_;
  int64_t max_iter_, display_every_;
  double last_draw_ = 0;
  bool drawn_ = false;
  std::string unit_ = "img";
};

std::string format_duration(double seconds);

}  // namespace bks
