// Scoring a net over several batches: the mean of each net output (Caffe's test pass).
#pragma once

#include <vector>

#include "runtime/net.h"

namespace bks {

struct Evaluation {
  std::vector<double> output_means;  // one per net.outputs(), each averaged over its elements
  double loss = 0;                   // mean weighted loss per batch
  int batches = 0;                   // batches these means are over
};

// Runs forward for steps first_step .. first_step + batches - 1; with parts > 1 only for
// those whose position i in that range has i % parts == part (data-parallel ranks share a
// test pass: combined, weighted by `batches`, the parts give the whole pass's means).
Evaluation evaluate(Net& net, int batches, int64_t first_step, int part = 0, int parts = 1);

}  // namespace bks
