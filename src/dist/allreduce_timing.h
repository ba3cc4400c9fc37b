// Timing gradient averaging on this world, for bench/allreduce.py: per message size, one
// blocking MPI_Allreduce, and the bucketed path training uses (GradientBuckets: an
// MPI_Iallreduce per bucket as it fills, then the mean).
#pragma once

#include <vector>

#include "dist/communicator.h"
#include "dist/gradient_buckets.h"

namespace bks::dist {

struct AllreduceTiming {
  size_t bytes = 0;
  double allreduce_s = 0;  // median of one blocking MPI_Allreduce
  double buckets_s = 0;    // median of one GradientBuckets step over the same bytes
  // Bus bandwidth (bytes each rank sends and receives in a ring allreduce: 2 (N-1) / N of
  // the message, per second), for each.
  double allreduce_bus_gbs = 0, buckets_bus_gbs = 0;
};

// For each size (bytes), `rounds` timings of each path, alternated; every rank must call it
// with the same arguments. The bucketed path sees the message as gradients of 1 MB that
// live in their buckets, as training's do (the mean taken in place, nothing copied).
std::vector<AllreduceTiming> time_allreduce(Communicator& comm, const std::vector<size_t>& sizes, int rounds,
                                            const BucketOptions& buckets);

}  // namespace bks::dist
