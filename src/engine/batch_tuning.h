// deploy --batch auto: the batch size that gives a bundle the most throughput on this
// machine within a memory budget for activations; and deploy's autotuning: whether a batch
// runs faster in parts (micro batches).
#pragma once

#include <cstdint>
#include <string>

#include "engine/bundle.h"

namespace bks {

struct BatchChoice {
  int64_t batch = 1;
  std::string table;  // items/s (and arena MB) for each batch size tried, for the user
};

// Times the bundle at batch 1, 2, 4, ... while its activation arena fits `cap_bytes`, and
// stops once three sizes in a row give no more throughput than the best so far; then times
// each size again and keeps its higher rate (a burst of load on the machine once stopped
// the climb at batch 8 of a net whose best was 64, at 0.75 of its throughput). The
// smallest size within 2% of the best wins. InputError when even batch 1 does not fit.
BatchChoice choose_batch(const Bundle& b, const std::string& name, int threads, double cap_bytes);

struct MicroBatchChoice {
  int64_t micro = 0;  // items per forward; 0: the whole batch at once
  // The node the parts run through, the rest running whole (kPartsUntilKey; "": all of it).
  std::string until;
  size_t arena_bytes = 0;  // the activation arena of a net computing `micro` items (when chosen)
  std::string table;  // milliseconds per batch for each part size tried
};

// For a bundle of batch N > 1: times N / m forwards of m items for each power of two m
// dividing N (up to 64) against the whole batch at once (alternating rounds, each keeping its
// lowest time) and picks the fastest; parts win only when 3% faster and giving the whole
// batch's outputs. Smaller parts keep each layer's output in cache for the next layer
// (MobileNet v2 at batch 32 on 2 AVX-512 cores: 255 items/s whole, 287 in parts of 16).
// Then, from each layer's time whole and in those parts, the node after which the rest
// runs faster whole (a classifier reading its weights once a batch, not once a part); kept
// when the cut session is 3% faster still and gives the same outputs.
MicroBatchChoice choose_micro_batch(const Bundle& b, const std::string& name, int threads);

struct LayoutChoice {
  bool blocked = false;  // convolutions write 16-channel blocks (NetOptions::blocked_activations)
  std::string table;     // milliseconds per batch in each layout ("" when not timed)
};

// On AVX-512, where convolutions write channels-last by default: times the bundle (its
// whole batch, in parts of `plain_micro` items, 0: at once) against it with them writing
// oneDNN's 16-channel blocks (in parts of `blocked_micro`), alternating rounds, each
// keeping its lowest time. Blocks win only when 3% faster and giving the same outputs.
// b.info is left without kActivationLayoutKey. Which layout wins depends on the net:
// MobileNet v1 at batch 32 ran 174-178 ms blocked against 185-204 channels-last.
LayoutChoice choose_activation_layout(Bundle& b, const std::string& name, int threads, int64_t plain_micro,
                                      int64_t blocked_micro);

}  // namespace bks
