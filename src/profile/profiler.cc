#include "profile/profiler.h"

#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace bks {

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

void Profiler::resize(int nodes) {
  fwd_us_.assign(nodes, 0.0);
  bwd_us_.assign(nodes, 0.0);
}

void Profiler::record(int node, const std::string& name, Pass pass, double start_us, double end_us) {
  auto& v = pass == Pass::forward ? fwd_us_ : bwd_us_;
  if (node >= static_cast<int>(v.size())) resize(node + 1);
  (pass == Pass::forward ? fwd_us_ : bwd_us_)[node] += end_us - start_us;
  if (keep_spans_) spans_.push_back({name, pass, start_us, end_us - start_us});
}

void Profiler::reset_totals() {
  std::fill(fwd_us_.begin(), fwd_us_.end(), 0.0);
  std::fill(bwd_us_.begin(), bwd_us_.end(), 0.0);
  spans_.clear();
}

double Profiler::total_ms(int node, Pass pass) const {
  const auto& v = pass == Pass::forward ? fwd_us_ : bwd_us_;
  return node < static_cast<int>(v.size()) ? v[node] / 1000.0 : 0.0;
}

void Profiler::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  double t0 = spans_.empty() ? 0.0 : spans_.front().start_us;
  for (auto& s : spans_) {
    events.push_back({{"name", s.name},
                      {"cat", s.pass == Pass::forward ? "forward" : "backward"},
                      {"ph", "X"},
                      {"ts", s.start_us - t0},
                      {"dur", s.dur_us},
                      {"pid", 1},
                      {"tid", s.pass == Pass::forward ? 1 : 2}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  write_file_atomic(path, doc.dump());
}

}  // namespace bks
