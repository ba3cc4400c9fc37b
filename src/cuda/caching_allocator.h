// Device memory for one GPU, cached: a freed block goes to a free list by its rounded size
// and the next request of that size takes it, so a training step in steady state calls
// cudaMalloc not at all (cudaMalloc and cudaFree synchronise the device). Sizes round up to
// 512 bytes below 1 MiB and to 2 MiB above, which keeps the lists few and the waste small.
// Every kernel runs on the backend's one stream, so a block freed while a kernel still
// reads it is reused only by work queued after that kernel.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace bks::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // RuntimeError naming the GPU and the sizes when the device has no room even after the
  // cache is returned to it.
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);
  // Returns every cached block to the device.
  void empty_cache();

  struct Stats {
    size_t device_allocations = 0;  // cudaMalloc calls
    size_t reuses = 0;              // requests served from the cache
    size_t in_use_bytes = 0, cached_bytes = 0;
  };
  Stats stats() const;
  static size_t rounded(size_t bytes);

 private:
  void empty_cache_locked();
  int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  Stats stats_;
};

}  // namespace bks::cuda
