#include "engine/batch_tuning.h"

#include <fmt/format.h>

#include "core/error.h"
#include "engine/session.h"
#include "profile/profiler.h"

namespace bks {

BatchChoice choose_batch(const Bundle& b, const std::string& name, int threads, double cap_bytes) {
  BatchChoice c;
  double best = 0;
  int worse = 0;
  c.table = "batch auto: items/s by batch size (activation arena)\n";
  for (int64_t batch = 1; batch <= 4096 && worse < 2; batch *= 2) {
    InferenceSession s(b, name, threads, batch);
    double arena = static_cast<double>(s.net().planned_bytes());
    if (arena > cap_bytes) {
      if (batch == 1)
        input_error("--memory-cap {:.3f} MB: even batch 1 needs {:.3f} MB of activations", cap_bytes / 1e6,
                    arena / 1e6);
      c.table += fmt::format("  {:>5}  arena {:.1f} MB exceeds the cap\n", batch, arena / 1e6);
      break;
    }
    for (int v : s.inputs()) s.value(v).fill(0.5f);
    for (int i = 0; i < 3; ++i) s.run();
    int runs = 0;
    double t0 = now_us(), elapsed = 0;
    while (runs < 5 || elapsed < 2e5) {  // at least 5 runs and 0.2 s
      s.run();
      ++runs;
      elapsed = now_us() - t0;
    }
    double rate = batch * runs / (elapsed / 1e6);
    c.table += fmt::format("  {:>5}  {:>10.0f} items/s  ({:.1f} MB)\n", batch, rate, arena / 1e6);
    if (rate > best * 1.02) {
      best = rate;
      c.batch = batch;
      worse = 0;
    } else {
      ++worse;
    }
  }
  c.table += fmt::format("  chosen: batch {}\n", c.batch);
  return c;
}

}  // namespace bks
