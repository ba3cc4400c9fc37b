#include <omp.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/sysinfo.h"

namespace bks::cli {

Runner add_device_query(CLI::App& app) {
  app.add_subcommand("device_query", "Show the CPU, its instruction sets and the kernel libraries");
  return [] {
    SysInfo s = query_sysinfo();
    fmt::print("CPU:            {}\n", s.cpu_model);
    fmt::print("Cores:          {} physical, {} logical\n", s.physical_cores, s.logical_cpus);
    fmt::print("Memory:         {:.1f} GiB\n", s.memory_gb);
    fmt::print("ISA:            {}\n", fmt::join(s.isa, " "));
    auto yes = [&](const char* f) { return s.has(f) ? "yes" : "no"; };
    fmt::print("  AVX2 {}  AVX-512 {}  VNNI {}  BF16 {}  AMX {}\n", yes("avx2"), yes("avx512f"),
               s.has("avx512_vnni") || s.has("avx_vnni") ? "yes" : "no", yes("avx512_bf16"), yes("amx_tile"));
    fmt::print("oneDNN:         {} (kernels for {})\n", onednn_version(), onednn_isa());
    fmt::print("OpenMP threads: {}\n", omp_get_max_threads());
    fmt::print("GPUs:           none (this build has no CUDA backend)\n");
    return 0;
  };
}

}  // namespace bks::cli
