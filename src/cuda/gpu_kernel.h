// Base of the CUDA kernels: the backend they run on, and a name for `time` and --verbose.
#pragma once

#include <string>

#include "cuda/cuda_backend.h"
#include "ops/op.h"

namespace bks::cuda {

class GpuKernel : public Kernel {
 public:
  explicit GpuKernel(const OpInit& i) : Kernel(i), gpu_(static_cast<CudaBackend&>(i.backend)) {}
  std::string kernel_name() const override { return "CUDA"; }

 protected:
  CudaBackend& gpu_;
};

}  // namespace bks::cuda
