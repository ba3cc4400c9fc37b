#include "engine/batch_tuning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/dnnl_util.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/graph_cut.h"
#include "engine/session.h"
#include "profile/profiler.h"

namespace bks {

namespace {

// Items/s of the bundle at `batch` (after warm-up: at least 5 runs and 0.2 s); `arena` gets
// its activation bytes, and the rate is 0 without a run when they exceed `cap_bytes`.
double items_per_s(const Bundle& b, const std::string& name, int threads, int64_t batch, double cap_bytes,
                   double& arena) {
  InferenceSession s(b, name, threads, batch);
  arena = static_cast<double>(s.net().planned_bytes());
  if (arena > cap_bytes) return 0;
  for (int v : s.inputs()) s.value(v).fill(0.5f);
  for (int i = 0; i < 3; ++i) s.run();
  int runs = 0;
  double t0 = now_us(), elapsed = 0;
  while (runs < 5 || elapsed < 2e5) {
    s.run();
    ++runs;
    elapsed = now_us() - t0;
  }
  return static_cast<double>(batch) * runs / (elapsed / 1e6);
}

}  // namespace

BatchChoice choose_batch(const Bundle& b, const std::string& name, int threads, double cap_bytes) {
  struct Tried {
    int64_t batch;
    double arena, rate;
  };
  std::vector<Tried> tried;
  BatchChoice c;
  c.table = "batch auto: items/s by batch size (activation arena), the higher of two rounds\n";
  // Round one climbs until three sizes in a row give no more than the best so far.
  double best = 0;
  std::string capped;
  for (int64_t batch = 1, worse = 0; batch <= 4096 && worse < 3; batch *= 2) {
    double arena = 0;
    const double rate = items_per_s(b, name, threads, batch, cap_bytes, arena);
    if (arena > cap_bytes) {
      if (batch == 1)
        input_error("--memory-cap {:.3f} MB: even batch 1 needs {:.3f} MB of activations", cap_bytes / 1e6,
                    arena / 1e6);
      capped = fmt::format("  {:>5}  arena {:.1f} MB exceeds the cap\n", batch, arena / 1e6);
      break;
    }
    tried.push_back({batch, arena, rate});
    worse = rate > best * 1.02 ? 0 : worse + 1;
    best = std::max(best, rate);
  }
  // Round two times every size again: a burst of load on the machine only slows a run, so
  // each size keeps its higher rate.
  for (Tried& t : tried) {
    double arena = 0;
    t.rate = std::max(t.rate, items_per_s(b, name, threads, t.batch, cap_bytes, arena));
  }
  // A larger batch costs memory and latency: it is chosen only when 2% faster.
  best = 0;
  for (const Tried& t : tried) {
    c.table += fmt::format("  {:>5}  {:>10.0f} items/s  ({:.1f} MB)\n", t.batch, t.rate, t.arena / 1e6);
    if (t.rate > best * 1.02) {
      best = t.rate;
      c.batch = t.batch;
    }
  }
  c.table += capped + fmt::format("  chosen: batch {}\n", c.batch);
  return c;
}

namespace {

// Lowest milliseconds of `runs` runs.
double best_run_ms(InferenceSession& s, int runs) {
  double best = INFINITY;
  for (int i = 0; i < runs; ++i) {
    const double t0 = now_us();
    s.run();
    best = std::min(best, (now_us() - t0) / 1e3);
  }
  return best;
}

// The cut for a batch chosen to run in parts of c.micro: each layer's time whole and in
// parts gives where parts through node k, then the rest whole, would take least; that
// session is kept when it gives the whole batch's outputs and runs 3% faster than `parts`.
void choose_parts_until(const Bundle& b, const std::string& name, int threads, InferenceSession& whole,
                        InferenceSession& parts, double parts_ms, double tolerance, MicroBatchChoice& c) {
  const std::vector<double> w = time_nodes(whole, 3), p = time_nodes(parts, 3);
  const Graph& g = parts.net().graph();
  if (w.size() != p.size() || p.size() != g.nodes.size() || g.nodes.size() != b.graph.nodes.size()) return;
  const size_t n = p.size();
  std::vector<double> sum_w(n + 1, 0), sum_p(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    sum_w[k + 1] = sum_w[k] + w[k];
    sum_p[k + 1] = sum_p[k] + p[k];
  }
  int best = -1;
  double best_ms = 0.97 * sum_p[n];
  for (size_t k = 0; k + 1 < n; ++k) {
    const double ms = sum_p[k + 1] + sum_w[n] - sum_w[k + 1];
    if (ms < best_ms && value_handed_after(b.graph, static_cast<int>(k)) >= 0) {
      best_ms = ms;
      best = static_cast<int>(k);
    }
  }
  if (best < 0) return;
  const std::string until = b.graph.nodes[static_cast<size_t>(best)].name;
  std::unique_ptr<InferenceSession> cut;
  try {
    cut = std::make_unique<InferenceSession>(b, name, threads, 0, c.micro, until);
  } catch (const InputError&) {
    return;  // it hands over int8 or bf16 values
  }
  if (!cut->tail()) return;
  fill_timing_inputs(*cut, 7);
  cut->run();
  if (max_relative_difference(whole, *cut) > tolerance) return;
  double cut_ms = INFINITY;
  for (int round = 0; round < 3; ++round) {
    cut_ms = std::min(cut_ms, best_run_ms(*cut, 2));
    parts_ms = std::min(parts_ms, best_run_ms(parts, 2));
  }
  c.table += fmt::format("  parts of {} through '{}', the rest whole: {:.2f} ms (in parts throughout {:.2f})\n",
                         c.micro, until, cut_ms, parts_ms);
  if (cut_ms < 0.97 * parts_ms) {
    c.until = until;
    c.arena_bytes = cut->planned_bytes();
  }
}

}  // namespace

MicroBatchChoice choose_micro_batch(const Bundle& b, const std::string& name, int threads) {
  MicroBatchChoice c;
  struct Candidate {
    int64_t micro;
    std::unique_ptr<InferenceSession> session;
    double ms = INFINITY;
  };
  std::vector<Candidate> cands;
  cands.push_back({0, std::make_unique<InferenceSession>(b, name, threads, 0, 0)});
  InferenceSession& whole = *cands[0].session;
  const int64_t n = whole.batch();
  fill_timing_inputs(whole, 7);
  whole.run();
  // Quantized kernels may round differently at another batch; FP32 ones only sum in
  // another order.
  const double tolerance = bundle_precision(b) == Precision::fp32 ? 1e-3 : 5e-2;
  for (int64_t m = 1; m < n && m <= 64; m *= 2) {
    if (n % m) continue;
    std::unique_ptr<InferenceSession> s;
    try {
      s = std::make_unique<InferenceSession>(b, name, threads, 0, m);
    } catch (const InputError&) {
      continue;  // shapes fixed for the whole batch (a Reshape to constants naming it)
    }
    if (s->micro_batch() != m) continue;  // the graph does not slice by items
    fill_timing_inputs(*s, 7);
    s->run();
    if (max_relative_difference(whole, *s) > tolerance) continue;
    cands.push_back({m, std::move(s)});
  }
  if (cands.size() == 1) return c;
  std::vector<int64_t> sizes;
  for (size_t k = 1; k < cands.size(); ++k) sizes.push_back(cands[k].micro);
  log::info("autotune: timing batch {} whole and in parts of {} item(s)", n, fmt::join(sizes, ", "));
  for (int round = 0; round < 3; ++round) {
    for (Candidate& k : cands)
      if (k.session) k.ms = std::min(k.ms, best_run_ms(*k.session, 2));
    // Parts far behind after the first round are not timed again.
    double best = INFINITY;
    for (const Candidate& k : cands) best = std::min(best, k.ms);
    for (Candidate& k : cands)
      if (k.micro && k.ms > 1.15 * best) k.session.reset();
  }
  const Candidate* pick = &cands[0];
  c.table = fmt::format("batch {}: ms per batch by items per forward\n", n);
  for (const Candidate& k : cands) {
    c.table += fmt::format("  {:>5}  {:.2f} ms\n", k.micro ? k.micro : n, k.ms);
    if (k.ms < pick->ms) pick = &k;
  }
  if (pick->micro && pick->ms < 0.97 * cands[0].ms) {
    c.micro = pick->micro;
    c.arena_bytes = pick->session->planned_bytes();
    choose_parts_until(b, name, threads, whole, *pick->session, pick->ms, tolerance, c);
  }
  c.table += fmt::format("  chosen: {}\n", c.micro ? fmt::format("parts of {}{}", c.micro,
                                                                 c.until.empty() ? "" : " up to '" + c.until + "'")
                                                   : std::string("whole"));
  return c;
}

LayoutChoice choose_activation_layout(Bundle& b, const std::string& name, int threads, int64_t plain_micro,
                                      int64_t blocked_micro) {
  LayoutChoice c;
  if (!onednn_has_avx512()) return c;  // elsewhere convolutions write oneDNN's blocks already
  b.info.erase(kActivationLayoutKey);
  InferenceSession plain(b, name, threads, 0, plain_micro);
  b.info[kActivationLayoutKey] = kBlockedLayout;
  InferenceSession blocked(b, name, threads, 0, blocked_micro);
  b.info.erase(kActivationLayoutKey);
  fill_timing_inputs(plain, 7);
  fill_timing_inputs(blocked, 7);
  plain.run();
  blocked.run();
  const double tolerance = bundle_precision(b) == Precision::fp32 ? 1e-3 : 5e-2;
  if (max_relative_difference(plain, blocked) > tolerance) return c;
  double plain_ms = INFINITY, blocked_ms = INFINITY;
  for (int round = 0; round < 3; ++round) {
    plain_ms = std::min(plain_ms, best_run_ms(plain, 2));
    blocked_ms = std::min(blocked_ms, best_run_ms(blocked, 2));
  }
  c.blocked = blocked_ms < 0.97 * plain_ms;
  auto how = [](const char* layout, const InferenceSession& s) {
    return s.micro_batch() < s.batch() ? fmt::format("{} in parts of {}", layout, s.micro_batch())
                                       : fmt::format("{}, whole", layout);
  };
  c.table = fmt::format("batch {}: ms per batch by the convolutions' output layout\n", plain.batch());
  c.table += fmt::format("  {:<34} {:.2f} ms\n", how("channels-last", plain), plain_ms);
  c.table += fmt::format("  {:<34} {:.2f} ms\n", how("16-channel blocks", blocked), blocked_ms);
  c.table += fmt::format("  chosen: {}\n", c.blocked ? "16-channel blocks" : "channels-last");
  return c;
}

}  // namespace bks
