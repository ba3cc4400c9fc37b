// `bakusoku train --ranks N`: the mpirun line for N ranks on this machine, printed so that
// users learn the real command, then run in this process's place.
#pragma once

#include <string>
#include <vector>

#include "train/trainer.h"

namespace bks::cli {

// mpirun's arguments (argv[0] first) for `ranks` ranks of `bakusoku train` with `opt`:
// each rank on cores of its own (unless `pin` is false: the dashboard's jobs share the
// machine with other jobs) with cores / ranks threads, or oversubscribed and unpinned when
// there are more ranks than cores.
std::vector<std::string> mpirun_command(int ranks, const TrainOptions& opt, bool verbose, bool pin = true);
// Prints the command and executes it (never returns); InputError when mpirun is missing.
[[noreturn]] void run_under_mpirun(const std::vector<std::string>& command);

}  // namespace bks::cli
