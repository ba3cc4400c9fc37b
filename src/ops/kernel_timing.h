// Timing a candidate kernel where a layer chooses between them (deploy's autotuning).
#pragma once

#include <algorithm>
#include <chrono>

namespace bks {

// The best of three timed calls of `run` after a warm-up one, in milliseconds.
template <class F>
double best_of_three_ms(F&& run) {
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::min(best, ms);
  }
  return best;
}

}  // namespace bks
