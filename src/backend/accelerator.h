// What a build knows of its GPUs. The CUDA layer (src/cuda) registers itself here when its
// library loads, which accelerator() does on first call (a CPU-only run never loads it); a
// build without it, or a machine without a GPU, answers "none" and says why, so callers
// above the backends (device_query, train --gpu, the dashboard) need no #ifdef.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace bks {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  size_t memory_bytes = 0;
  int multiprocessors = 0;
  double clock_ghz = 0;
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;
  // Driver, runtime and library versions, one line ("CUDA driver 13.0, runtime 13.0, ...").
  virtual std::string versions() const = 0;
  // The GPUs present; empty when there is none or no driver (why_none() says which).
  virtual std::vector<GpuInfo> gpus() const = 0;
  virtual std::string why_none() const = 0;
  // A backend on GPU `index`, with TF32 arithmetic for FP32 work when `tf32` (it changes
  // results, so it is off unless asked); RuntimeError naming the GPUs there are when it
  // does not exist.
  virtual std::unique_ptr<Backend> make_backend(int index, bool tf32) const = 0;
};

void register_accelerator(const Accelerator* a);
// The accelerator, its library loaded on the first call; null in a build without a GPU
// backend or where that library cannot load (make_gpu_backend says why).
const Accelerator* accelerator();

// Why GPU `index` cannot be used, said plainly (the build has no CUDA backend or cannot
// load it, the machine has no GPU, or not that many); empty when it can. Checks without
// creating a backend, so callers can validate a request before any work starts.
std::string gpu_problem(int index);

// A backend on GPU `index`; RuntimeError with gpu_problem() when there is none.
std::unique_ptr<Backend> make_gpu_backend(int index, bool tf32 = false);

}  // namespace bks
