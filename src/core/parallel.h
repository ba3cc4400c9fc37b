// Splitting simple loops across the OpenMP threads.
#pragma once

#include <omp.h>

#include <cstdint>

namespace bks {

// Elements of work below which an OpenMP parallel region costs more than it saves (its
// fork/join is a few microseconds; batch-1 inference is full of such small loops).
constexpr int64_t kSerialBelow = 32768;

// Runs body(begin, end) over [0, n) split evenly across the OpenMP threads (serially when n
// is below `serial_below` or only one thread runs). The body's own `omp simd` loop then
// vectorises: GCC 12 does not vectorise the combined `parallel for simd` form of these
// loops once they call small inline helpers.
template <class Body>
void parallel_ranges(int64_t n, Body&& body, int64_t serial_below = kSerialBelow) {
  if (n < serial_below || omp_get_max_threads() == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    body(n * t / nt, n * (t + 1) / nt);
  }
}

}  // namespace bks
