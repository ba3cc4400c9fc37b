// Unstructured magnitude pruning with a gradual schedule (train --prune S; Zhu & Gupta's
// automated gradual pruning): Convolution / InnerProduct weights keep only the largest in
// magnitude (ranked over all those layers together, or per blob), the pruned fraction ramping from 0 to S between two
// iterations (s(t) = S (1 - (1 - (t - begin) / (end - begin))^3), fast at first and gently at the end) while training
// goes on. Masks are recomputed every `every` iterations of the ramp and applied after every solver step, so pruned
// weights stay zero through the updates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/magnitude_masks.h"  // the ranking, shared with optimize
#include "graph/param_store.h"
#include "runtime/net.h"

namespace bks {

struct PruningSchedule {
  double sparsity = 0;  // the final fraction of each weight blob that is zero, in [0, 1)
  int64_t begin = 0;    // the ramp's first iteration
  int64_t end = 0;      // the iteration it reaches `sparsity` (> begin)
  int64_t every = 100;  // iterations between mask updates on the ramp
  // "global": all the pruned weights ranked together by magnitude (one threshold, so layers
  // whose weights are larger keep more of them); "lamp": ranked together by LAMP score
  // (engine/magnitude_masks.h: scale-free per layer); "layer": each blob on its own.
  std::string scope = "global";
  // The fraction pruned at iteration `iter`: 0 before begin, `sparsity` from end on.
  double at(int64_t iter) const;
  // InputError naming the option when a value is out of range; `max_iter`: the solver's.
  void check(int64_t max_iter) const;
};

class MagnitudePruning {
 public:
  // The weights (blob 0) of `net`'s Convolution and InnerProduct nodes, each once.
  MagnitudePruning(ParamStore& store, const Net& net, PruningSchedule schedule);
  // Before the first step, at iteration `iter`, with the weights loaded: a run resumed on
  // the ramp or after it takes the zeros of its weights as its masks (exactly those it was
  // stopped with, since masked weights are zero after every step).
  void start(int64_t iter);
  // After the solver's update that ended iteration `iter` - 1 (the trainer's iter_ after
  // incrementing): new masks when the schedule says so, then the masks applied.
  void after_step(int64_t iter);
  // The fraction of all pruned weights that are zero now.
  double sparsity() const;
  int layers() const { return static_cast<int>(weights_.size()); }

 private:
  struct Weight {
    int param;
    std::vector<uint8_t> keep;  // 1: kept
  };
  ParamStore& store_;
  PruningSchedule schedule_;
  std::vector<Weight> weights_;
  bool have_masks_ = false;
  bool final_ = false;  // the masks hold the final sparsity
};

}  // namespace bks
