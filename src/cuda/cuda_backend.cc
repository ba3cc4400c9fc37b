#include "cuda/cuda_backend.h"

#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/accelerator.h"
#include "core/device_memory.h"
#include "core/error.h"
#include "cuda/caching_allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/elementwise.h"

namespace bks::cuda {

void call_failed(const char* message, const char* call, const char* file, int line) {
  runtime_error("CUDA: {} failed: {} ({}:{})", call, message, file, line);
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

// One cache per GPU, made on first use and kept for the process's life (tensors may be
// freed during static destruction).
CachingAllocator& allocator_for(int index) {
  static std::mutex mu;
  static std::vector<CachingAllocator*> all;
  std::lock_guard<std::mutex> lock(mu);
  if (index >= static_cast<int>(all.size())) all.resize(index + 1, nullptr);
  if (!all[index]) all[index] = new CachingAllocator(index);
  return *all[index];
}

void* allocate(size_t bytes, int index) {
  void* p = allocator_for(index).allocate(bytes);
  BKS_CUDA_CALL(cudaMemset(p, 0, bytes));
  return p;
}

void release(void* p, size_t bytes, int index) { allocator_for(index).release(p, bytes); }

void copy(void* dst, Device, const void* src, Device, size_t bytes) {
  // Unified addressing: the runtime knows each pointer's device. The legacy default stream
  // waits for the backends' (blocking) streams, so kernels that wrote src have finished.
  BKS_CUDA_CALL(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void zero(void* p, size_t bytes, Device) { BKS_CUDA_CALL(cudaMemset(p, 0, bytes)); }

void add(float* dst, const float* src, int64_t n, Device) {
  // On the legacy default stream, which waits for the backends' blocking streams.
  add_into(dst, src, n, nullptr);
}

const DeviceMemoryOps kMemoryOps{allocate, release, copy, zero, add};

std::string version_str(int v, int major_div, int minor_div) {
  return fmt::format("{}.{}", v / major_div, (v % major_div) / minor_div);
}

class CudaAccelerator final : public Accelerator {
 public:
  std::string versions() const override {
    int driver = 0, runtime = 0, nccl = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    ncclGetVersion(&nccl);
    size_t cudnn = cudnnGetVersion();
    return fmt::format("CUDA driver {}, runtime {}, cuDNN {}.{}.{}, NCCL {}.{}.{}",
                       driver ? version_str(driver, 1000, 10) : "none", version_str(runtime, 1000, 10), cudnn / 10000,
                       cudnn % 10000 / 100, cudnn % 100, nccl / 10000, nccl % 10000 / 100, nccl % 100);
  }
  std::vector<GpuInfo> gpus() const override {
    std::vector<GpuInfo> r;
    int n = gpu_count();
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
      int clock_khz = 0;
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, i);
      r.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount, clock_khz / 1e6});
    }
    return r;
  }
  std::string why_none() const override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    int driver = 0;
    cudaDriverGetVersion(&driver);
    if (driver == 0) return "this machine has no GPU (no NVIDIA driver is installed)";
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) return "this machine has no GPU";
    if (e != cudaSuccess) return fmt::format("no GPU is usable here ({})", cudaGetErrorString(e));
    return "";
  }
  std::unique_ptr<Backend> make_backend(int index, bool tf32) const override {
    auto b = std::make_unique<CudaBackend>(index);
    b->set_tf32(tf32);
    return b;
  }
};

// Registers the memory operations and the accelerator as the library loads.
struct Registration {
  Registration() {
    set_device_memory_ops(DeviceKind::cuda, &kMemoryOps);
    static CudaAccelerator instance;
    register_accelerator(&instance);
  }
} registration;

}  // namespace

AllocatorStats allocator_stats(int index) {
  CachingAllocator::Stats s = allocator_for(index).stats();
  return {s.device_allocations, s.reuses, s.in_use_bytes, s.cached_bytes};
}

CudaBackend::CudaBackend(int index) : index_(index) {
  int n = gpu_count();
  if (index < 0 || index >= n)
    runtime_error("GPU {} does not exist: this machine has {} GPU{}{}", index, n, n == 1 ? "" : "s",
                  n ? fmt::format(" (0 to {})", n - 1) : "");
  BKS_CUDA_CALL(cudaSetDevice(index_));
  BKS_CUDA_CALL(cudaStreamCreate(&stream_));
  BKS_CUBLAS_CALL(cublasCreate(&cublas_));
  BKS_CUBLAS_CALL(cublasSetStream(cublas_, stream_));
  BKS_CUDNN_CALL(cudnnCreate(&cudnn_));
  BKS_CUDNN_CALL(cudnnSetStream(cudnn_, stream_));
  set_tf32(false);
  if (const char* mb = std::getenv("BKS_CUDNN_WORKSPACE_MB")) {
    char* end = nullptr;
    long long v = std::strtoll(mb, &end, 10);
    if (end == mb || *end || v < 0 || v > (1LL << 30))
      input_error("BKS_CUDNN_WORKSPACE_MB={}: give a number of megabytes", mb);
    workspace_limit_ = static_cast<size_t>(v) << 20;
  }
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  workspace_ = Tensor();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::set_tf32(bool on) {
  tf32_ = on;
  // CUBLAS_DEFAULT_MATH computes FP32 in FP32; TF32 only when asked.
  BKS_CUBLAS_CALL(cublasSetMathMode(cublas_, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

std::string CudaBackend::describe() const {
  cudaDeviceProp p{};
  BKS_CUDA_CALL(cudaGetDeviceProperties(&p, index_));
  return fmt::format("GPU {}: {} (compute {}.{}, {:.0f} GiB), TF32 {}", index_, p.name, p.major, p.minor,
                     p.totalGlobalMem / double(1 << 30), tf32_ ? "on" : "off");
}

void CudaBackend::enter() const { BKS_CUDA_CALL(cudaSetDevice(index_)); }

void* CudaBackend::workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!workspace_.defined() || workspace_.bytes() < bytes)
    workspace_ = Tensor({static_cast<int64_t>(bytes)}, DType::u8, device());
  return workspace_.raw();
}

void CudaBackend::synchronize() const { BKS_CUDA_CALL(cudaStreamSynchronize(stream_)); }

}  // namespace bks::cuda
