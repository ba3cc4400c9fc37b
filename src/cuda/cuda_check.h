// Error checks for CUDA, cuBLAS and cuDNN calls: a failed call is a RuntimeError naming the
// call, the library's own message and where it was made (an out-of-memory is the user's
// to act on: a smaller batch, another GPU).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace bks::cuda {

[[noreturn]] void call_failed(const char* message, const char* call, const char* file, int line);

}  // namespace bks::cuda

#define BKS_CUDA_CALL(x)                                                                                     \
  do {                                                                                                       \
    cudaError_t bks_e_ = (x);                                                                                \
    if (bks_e_ != cudaSuccess) ::bks::cuda::call_failed(cudaGetErrorString(bks_e_), #x, __FILE__, __LINE__); \
  } while (0)
#define BKS_CUDNN_CALL(x)                                                                                              \
  do {                                                                                                                 \
    cudnnStatus_t bks_s_ = (x);                                                                                        \
    if (bks_s_ != CUDNN_STATUS_SUCCESS) ::bks::cuda::call_failed(cudnnGetErrorString(bks_s_), #x, __FILE__, __LINE__); \
  } while (0)
#define BKS_CUBLAS_CALL(x)                                                             \
  do {                                                                                 \
    cublasStatus_t bks_s_ = (x);                                                       \
    if (bks_s_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::bks::cuda::call_failed(cublasGetStatusString(bks_s_), #x, __FILE__, __LINE__); \
  } while (0)
