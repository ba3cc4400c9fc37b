// Scoring a net over several batches: the mean of each net output (Caffe's test pass).
#pragma once

#include <vector>

#include "runtime/net.h"

namespace bks {

struct Evaluation {
  std::vector<double> output_means;  // one per net.outputs(), each averaged over its elements
  double loss = 0;                   // mean weighted loss per batch
};

// Runs forward for steps first_step .. first_step + batches - 1.
Evaluation evaluate(Net& net, int batches, int64_t first_step);

}  // namespace bks
