// Per-op timing for `bakusoku time` and Chrome/Perfetto traces.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace bks {

double now_us();

class Profiler {
 public:
  enum class Pass { forward, backward };
  explicit Profiler(bool keep_spans = false) : keep_spans_(keep_spans) {}
  void resize(int nodes);
  void record(int node, const std::string& name, Pass pass, double start_us, double end_us);
  void reset_totals();
  double total_ms(int node, Pass pass) const;
  // Writes the recorded spans as Chrome trace JSON (chrome://tracing, ui.perfetto.dev).
  void write_chrome_trace(const std::string& path) const;

 private:
  struct Span {
    std::string name;
    Pass pass;
    double start_us, dur_us;
  };
  bool keep_spans_;
  std::vector<double> fwd_us_, bwd_us_;
  std::vector<Span> spans_;
};

}  // namespace bks
