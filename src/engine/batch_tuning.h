// deploy --batch auto: the batch size that gives a bundle the most throughput on this
// machine within a memory budget for activations.
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
// stops once two sizes in a row give no more throughput than the best so far. InputError
// when even batch 1 does not fit.
BatchChoice choose_batch(const Bundle& b, const std::string& name, int threads, double cap_bytes);

}  // namespace bks
