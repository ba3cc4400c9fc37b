// bakusoku allreduce-bench: times gradient averaging across the ranks mpirun started
// (hidden; bench/allreduce.py runs it). Rank 0 prints one JSON line per message size.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/allreduce_timing.h"

namespace bks::cli {

Runner add_allreduce_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("allreduce-bench", "Time gradient allreduce across MPI ranks (bench/allreduce.py)");
  cmd->group("");
  auto rounds = std::make_shared<int>(10);
  auto max_mb = std::make_shared<double>(64);
  cmd->add_option("--rounds", *rounds, "Timings per size (median reported)")->check(CLI::PositiveNumber);
  cmd->add_option("--max-mb", *max_mb, "Largest message, MB (from 4 KB, times 4)")->check(CLI::PositiveNumber);
  return [rounds, max_mb] {
    dist::Communicator& comm = dist::world();
    if (comm.size() < 2) input_error("allreduce-bench: run it under mpirun with 2 or more ranks");
    std::vector<size_t> sizes;
    for (size_t b = 4096; b <= static_cast<size_t>(*max_mb * (1 << 20)); b *= 4) sizes.push_back(b);
    for (const auto& t : dist::time_allreduce(comm, sizes, *rounds, dist::BucketOptions{}))
      if (comm.rank() == 0)
        fmt::print(
            "{{\"bytes\": {}, \"ranks\": {}, \"allreduce_ms\": {:.4f}, \"buckets_ms\": {:.4f}, "
            "\"allreduce_bus_gbs\": {:.3f}, \"buckets_bus_gbs\": {:.3f}}}\n",
            t.bytes, comm.size(), t.allreduce_s * 1e3, t.buckets_s * 1e3, t.allreduce_bus_gbs, t.buckets_bus_gbs);
    return 0;
  };
}

}  // namespace bks::cli
