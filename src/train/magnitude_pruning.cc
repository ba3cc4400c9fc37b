#include "train/magnitude_pruning.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/weight_blobs.h"

namespace bks {

double PruningSchedule::at(int64_t iter) const {
  if (sparsity <= 0 || iter < begin) return 0;
  if (iter >= end) return sparsity;
  const double left = 1.0 - static_cast<double>(iter - begin) / static_cast<double>(end - begin);
  return sparsity * (1.0 - left * left * left);
}

void PruningSchedule::check(int64_t max_iter) const {
  if (!(sparsity >= 0 && sparsity < 1)) input_error("--prune {}: the sparsity must be in [0, 1)", sparsity);
  if (begin < 0) input_error("--prune-from {}: must not be negative", begin);
  if (end <= begin) input_error("--prune-until {}: must come after --prune-from {}", end, begin);
  if (end > max_iter) input_error("--prune-until {}: after the solver's max_iter {}", end, max_iter);
  if (every <= 0) input_error("--prune-every {}: must be positive", every);
}

MagnitudePruning::MagnitudePruning(ParamStore& store, const Net& net, PruningSchedule schedule)
    : store_(store), schedule_(schedule) {
  for (const WeightBlob& b : weight_blobs(net)) weights_.push_back({b.param, {}});
}

void MagnitudePruning::start(int64_t iter) {
  if (schedule_.at(iter) <= 0) return;
  for (Weight& w : weights_) {
    const Tensor& t = store_.at(w.param).data;
    w.keep.resize(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) w.keep[static_cast<size_t>(i)] = t.f32()[i] != 0.f;
  }
  have_masks_ = true;
  final_ = iter >= schedule_.end;
}

void MagnitudePruning::after_step(int64_t iter) {
  const double want = schedule_.at(iter);
  if (want <= 0) return;
  if (!have_masks_) {  // the ramp's first step: nothing pruned yet
    for (Weight& w : weights_) w.keep.assign(static_cast<size_t>(store_.at(w.param).data.numel()), 1);
    have_masks_ = true;
  }
  // New masks every `every` iterations of the ramp, and once at its end.
  const bool update = iter >= schedule_.end ? !final_ : (iter - schedule_.begin) % schedule_.every == 0;
  if (update) {
    if (schedule_.scope != "layer") {
      std::vector<const Tensor*> all;
      for (const Weight& w : weights_) all.push_back(&store_.at(w.param).data);
      std::vector<std::vector<uint8_t>> keep =
          schedule_.scope == "lamp" ? lamp_masks(all, want) : magnitude_masks(all, want);
      for (size_t k = 0; k < weights_.size(); ++k) weights_[k].keep = std::move(keep[k]);
    } else {
      for (Weight& w : weights_) w.keep = magnitude_mask(store_.at(w.param).data, want);
    }
    final_ = iter >= schedule_.end;
  }
  for (Weight& w : weights_) {
    float* p = store_.at(w.param).data.f32();
    for (size_t i = 0; i < w.keep.size(); ++i)
      if (!w.keep[i]) p[i] = 0.f;
  }
}

double MagnitudePruning::sparsity() const {
  int64_t zeros = 0, all = 0;
  for (const Weight& w : weights_) {
    const Tensor& t = store_.at(w.param).data;
    for (int64_t i = 0; i < t.numel(); ++i) zeros += t.f32()[i] == 0.f;
    all += t.numel();
  }
  return all ? static_cast<double>(zeros) / static_cast<double>(all) : 0.0;
}

}  // namespace bks
