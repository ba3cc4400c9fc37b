#include "backend/backend.h"

#include <omp.h>

#include <fmt/format.h>

namespace bks {

CpuBackend::CpuBackend(int threads)
    : threads_(threads > 0 ? threads : omp_get_num_procs()), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  omp_set_num_threads(threads_);
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

void CpuBackend::enter() const {
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

std::string CpuBackend::describe() const { return fmt::format("cpu ({} threads, oneDNN)", threads_); }

}  // namespace bks
