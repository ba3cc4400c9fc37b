// Launchers of the CUDA kernels bakusoku writes itself (elementwise.cu): the elementwise
// work cuDNN and cuBLAS do not cover. Each queues its kernel on `s` and returns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace bks::cuda {

// y = x > 0 ? x : slope * x;  dx = dy * (x > 0 ? 1 : slope). In place allowed.
void relu_forward(const float* x, float* y, int64_t n, float slope, cudaStream_t s);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, float slope, cudaStream_t s);
// y = 1 / (1 + e^-x);  dx = dy * y * (1 - y).
void sigmoid_forward(const float* x, float* y, int64_t n, cudaStream_t s);
void sigmoid_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s);
// y = tanh(x);  dx = dy * (1 - y^2).
void tanh_forward(const float* x, float* y, int64_t n, cudaStream_t s);
void tanh_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s);
// dst[i] += src[i].
void add_into(float* dst, const float* src, int64_t n, cudaStream_t s);
// p[i] = v for i < n.
void fill(float* p, int64_t n, float v, cudaStream_t s);

}  // namespace bks::cuda
