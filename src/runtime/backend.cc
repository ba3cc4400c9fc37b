#include "runtime/backend.h"

#include <omp.h>

#include <fmt/format.h>

namespace bks {

CpuBackend::CpuBackend(int threads)
    : threads_(threads > 0 ? threads : omp_get_num_procs()),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {
  omp_set_num_threads(threads_);
}

std::string CpuBackend::describe() const { return fmt::format("cpu ({} threads, oneDNN)", threads_); }

}  // namespace bks
