#include <omp.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/accelerator.h"
#include "backend/backend.h"
#include "cli/commands.h"
#include "core/sysinfo.h"

namespace bks::cli {

Runner add_device_query(CLI::App& app) {
  app.add_subcommand("device_query", "Show the CPU, its instruction sets, the kernel libraries and the GPUs");
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
    const Accelerator* gpu = accelerator();
    if (!gpu) {
      fmt::print("GPUs:           none (this build has no CUDA backend)\n");
      return 0;
    }
    fmt::print("CUDA:           {}\n", gpu->versions());
    std::vector<GpuInfo> gpus = gpu->gpus();
    if (gpus.empty()) fmt::print("GPUs:           none: {}\n", gpu->why_none());
    for (const GpuInfo& g : gpus)
      fmt::print("GPU {}:          {}, compute capability {}.{}, {:.1f} GiB, {} multiprocessors at {:.2f} GHz\n",
                 g.index, g.name, g.cc_major, g.cc_minor, g.memory_bytes / double(1 << 30), g.multiprocessors,
                 g.clock_ghz);
    return 0;
  };
}

}  // namespace bks::cli
