#include "cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace bks::cuda {

size_t CachingAllocator::rounded(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallLimit = size_t{1} << 20;
  bytes = bytes ? bytes : 1;
  return bytes < kSmallLimit ? (bytes + kSmall - 1) / kSmall * kSmall : (bytes + kLarge - 1) / kLarge * kLarge;
}

CachingAllocator::~CachingAllocator() {
  // At process exit the driver may already be gone; nothing to report then.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    stats_.reuses++;
    stats_.cached_bytes -= size;
    stats_.in_use_bytes += size;
    return p;
  }
  BKS_CUDA_CALL(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the sticky error state of this allocation
    empty_cache_locked();
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    runtime_error("cannot allocate {:.1f} MB on GPU {}: {} ({:.1f} of {:.1f} GB free; a smaller batch_size needs less)",
                  size / 1e6, device_, cudaGetErrorString(e), free_bytes / 1e9, total / 1e9);
  }
  stats_.device_allocations++;
  stats_.in_use_bytes += size;
  return p;
}

void CachingAllocator::release(void* p, size_t bytes) {
  if (!p) return;
  size_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[size].push_back(p);
  stats_.in_use_bytes -= size;
  stats_.cached_bytes += size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  cudaSetDevice(device_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) cudaFree(p);
    stats_.cached_bytes -= size * blocks.size();
    blocks.clear();
  }
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace bks::cuda
