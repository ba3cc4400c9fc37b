// bakusoku optimize (docs/compression.md): a search over the compression techniques and their
// combinations for the fastest (or smallest) bundle within an accuracy budget. Every candidate
// is a real bundle: deployed like `bakusoku deploy` makes it, scored on the net's whole test
// set and timed with the session that runs it, never judged by FLOPs.
//
// Without training it tries INT8 (mse and percentile calibration on the training data),
// BF16 where the CPU has it and, for size, fewer bits per stored weight, unstructured magnitude pruning, structured
// channel pruning (with BatchNorm statistics re-estimated) and low-rank factorisation, each from mild to aggressive
// until a level falls outside the budget, then the precisions on every model that fits, and
// channel pruning joined by magnitude pruning. With a fine-tune hook (optimize
// --allow-training) it also fine-tunes the pruned nets, plainly and distilled from the
// unoptimised net, and trains INT8 with QAT. For throughput each candidate runs at the batch
// that gives it the most items/s, unless a batch is given.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bks {

// A fine-tune optimize asks for: train `model` from `weights` with the extra `train` flags
// (e.g. {"--qat", "int8"}) into directory `dir`; the hook returns the final snapshot's path.
struct FineTune {
  std::string model, weights;
  std::vector<std::string> flags;
  std::string dir;
};

struct OptimizeOptions {
  std::string model, weights;         // a train/test prototxt (its TEST data scores) and its weights
  std::string work_dir;               // candidates' models and bundles
  double max_accuracy_drop = 0.5;     // percentage points of top-1 below the unoptimised bundle's
  std::string objective = "latency";  // latency (ms per batch), throughput (items/s) or size (bytes)
  int64_t batch = 0;                  // 0: 1, or for throughput each candidate's best (deploy --batch auto)
  double budget_seconds = 600;        // no candidate starts after this
  int threads = 0;
  std::function<std::string(const FineTune&)> fine_tune;  // empty: no training
};

struct Candidate {
  std::string name;                             // the techniques, e.g. "channels -40% + int8 (mse)"
  int techniques = 0;                           // how many it joins (0: the unoptimised net)
  std::string model, weights;                   // the net it deploys
  std::string precision = "fp32", calibration;  // calibration: INT8's method
  int weight_bits = 0;                          // weights stored on a grid of this many bits (size only)
  std::string bundle;                           // where it was written
  std::string error;                            // why it was not measured ("" when it was)
  double accuracy = 0;                          // top-1 over the whole test set
  int64_t batch = 0;                            // the batch it was timed at
  double ms = 0;                                // median time of one batch
  double items_per_s = 0;
  int64_t bytes = 0;    // the bundle file
  double seconds = 0;   // spent building and measuring it
  bool fits = false;    // accuracy within the budget
  bool pareto = false;  // no other candidate is as accurate, as fast and as small, and better in one
};

struct OptimizeResult {
  std::string objective;
  double max_accuracy_drop = 0;
  int64_t batch = 0;  // every candidate's; 0: each timed at the batch that gives it the most items/s
  int threads = 0;
  int64_t test_items = 0;              // scored per candidate
  std::vector<Candidate> candidates;   // [0]: the unoptimised net in FP32
  std::vector<std::string> not_tried;  // left when the time budget ran out
  int best = -1;                       // the best objective among those that fit
  int best_single = -1;                // the same among those of one technique
  double seconds = 0;
};

// The objective's figure of a measured candidate, lower is better (ms, -items/s, bytes).
double objective_cost(const OptimizeResult& r, const Candidate& c);

// Runs the search, `progress` seeing one line per candidate. InputError for options out of
// range (an unknown objective, a negative drop or batch, no time) and for a model without a
// TEST-phase data layer to score on; a candidate that fails keeps its error and the search
// goes on.
OptimizeResult optimize(const OptimizeOptions& o, const std::function<void(const std::string&)>& progress = {});

}  // namespace bks
