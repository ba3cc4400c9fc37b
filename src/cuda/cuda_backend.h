// The CUDA backend: one GPU, one stream, and the cuBLAS and cuDNN handles bound to that
// stream. Kernels receive it explicitly (there is no current-device mode): every launch,
// library call and copy they make goes to stream(). The stream is a blocking one, so the
// synchronous copies the tensors make (core/device_memory.h) are ordered with it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/tensor.h"

namespace bks::cuda {

class CudaBackend final : public Backend {
 public:
  // RuntimeError when GPU `index` does not exist (naming the GPUs there are).
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  Device device() const override { return {DeviceKind::cuda, index_}; }
  std::string describe() const override;
  void enter() const override;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }

  // TF32 tensor-core arithmetic for FP32 convolutions and matrix products: off by default,
  // since it rounds inputs to 10 mantissa bits and changes results (train --tf32).
  bool tf32() const { return tf32_; }
  void set_tf32(bool on);
  // The most scratch memory a cuDNN algorithm may use (BKS_CUDNN_WORKSPACE_MB, default
  // 1024); algorithms that need more are not chosen.
  size_t workspace_limit() const { return workspace_limit_; }
  void set_workspace_limit(size_t bytes) { workspace_limit_ = bytes; }
  // Scratch memory of at least `bytes`, shared by the kernels of this backend (they run one
  // at a time on its stream).
  void* workspace(size_t bytes);
  // Waits for everything queued on the stream.
  void synchronize() const;

 private:
  int index_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  bool tf32_ = false;
  size_t workspace_limit_ = size_t{1} << 30;
  Tensor workspace_;
};

// How many GPUs the driver shows (0 without a driver).
int gpu_count();

// What GPU `index`'s memory cache has done so far (device allocations, reuses, bytes).
struct AllocatorStats {
  size_t device_allocations = 0, reuses = 0, in_use_bytes = 0, cached_bytes = 0;
};
AllocatorStats allocator_stats(int index);

}  // namespace bks::cuda
