#include "cuda/elementwise.h"

#include "cuda/cuda_check.h"

namespace bks::cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride loops with a grid capped at what keeps every multiprocessor busy: one launch
// shape serves every size.
int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

template <class F>
__global__ void map_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) f(i);
}

template <class F>
void launch(int64_t n, cudaStream_t s, F f) {
  if (n <= 0) return;
  map_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, f);
  BKS_CUDA_CALL(cudaGetLastError());
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n, float slope, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) {
    float v = x[i];
    y[i] = v > 0.f ? v : slope * v;
  });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, float slope, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) { dx[i] = x[i] > 0.f ? dy[i] : slope * dy[i]; });
}

void sigmoid_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) { y[i] = 1.f / (1.f + expf(-x[i])); });
}

void sigmoid_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) {
    float v = y[i];
    dx[i] = dy[i] * v * (1.f - v);
  });
}

void tanh_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) { y[i] = tanhf(x[i]); });
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) {
    float v = y[i];
    dx[i] = dy[i] * (1.f - v * v);
  });
}

void add_into(float* dst, const float* src, int64_t n, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) { dst[i] += src[i]; });
}

void fill(float* p, int64_t n, float v, cudaStream_t s) {
  launch(n, s, [=] __device__(int64_t i) { p[i] = v; });
}

}  // namespace bks::cuda
