// Achieved TFLOP/s of bakusoku's GPU convolution kernel (cuDNN, algorithms chosen by
// measurement) on ResNet-50's convolutions, forward and backward (data + filter), in FP32
// and with TF32. Built with the CUDA backend; scripts/gpu_check.sh runs it.
//   gpu_conv_bench [-v] [batch ...]   (default: 64 256; -v logs every algorithm cuDNN measured)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/device_memory.h"
#include "core/log.h"
#include "core/rng.h"
#include "cuda/cuda_backend.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "ops/op.h"

using namespace bks;

namespace {

struct ConvCase {
  const char* name;
  int64_t c, hw, oc, k, stride, pad;
};

// ResNet-50's convolution shapes at 224x224, largest work first.
const ConvCase kCases[] = {
    {"conv1 7x7/2 3>64 @224", 3, 224, 64, 7, 2, 3},  {"res2 3x3 64>64 @56", 64, 56, 64, 3, 1, 1},
    {"res2 1x1 64>256 @56", 64, 56, 256, 1, 1, 0},   {"res3 3x3 128>128 @28", 128, 28, 128, 3, 1, 1},
    {"res4 3x3 256>256 @14", 256, 14, 256, 3, 1, 1}, {"res4 1x1 1024>256 @14", 1024, 14, 256, 1, 1, 0},
    {"res5 3x3 512>512 @7", 512, 7, 512, 3, 1, 1},
};

Tensor random_on(const Shape& s, Device d, uint64_t seed) {
  Tensor h(s);
  Rng rng(seed);
  for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = rng.uniform(-1.f, 1.f);
  return to_device(h, d);
}

// Milliseconds per call of f, the median of `reps` timed calls after two warm-ups.
template <class F>
double time_ms(cudaStream_t s, F f, int reps = 10) {
  f();
  f();
  std::vector<float> ms;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, s);
    f();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int64_t> batches;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "-v")
      log::set_level(log::Level::debug);
    else
      batches.push_back(std::atoll(argv[i]));
  }
  if (batches.empty()) batches = {64, 256};
  if (cuda::gpu_count() == 0) {
    fmt::print("gpu_conv_bench: skipped: no GPU\n");
    return 0;
  }
  cuda::CudaBackend gpu(0);
  fmt::print("{}\n", gpu.describe());
  fmt::print("{:<24} {:>5} {:>5} {:>9} {:>8} {:>9} {:>8}  {}\n", "convolution", "batch", "math", "fwd ms", "TFLOP/s",
             "bwd ms", "TFLOP/s", "algorithms");
  for (int64_t n : batches)
    for (const ConvCase& k : kCases)
      for (bool tf32 : {false, true}) {
        gpu.set_tf32(tf32);
        proto::LayerParameter lp;
        parse_prototxt_string(fmt::format("name: 'conv' type: 'Convolution' convolution_param {{ num_output: {} "
                                          "kernel_size: {} stride: {} pad: {} }}",
                                          k.oc, k.k, k.stride, k.pad),
                              "bench", lp);
        Node node = caffe_layer_node(lp, "bench");
        node.inputs = {0};
        node.outputs = {1};
        int64_t o = (k.hw + 2 * k.pad - k.k) / k.stride + 1;
        Shape xs{n, k.c, k.hw, k.hw}, ys{n, k.oc, o, o}, ws{k.oc, k.c, k.k, k.k};
        OpInit init{node, fmt::format("{} batch {} {}", k.name, n, tf32 ? "TF32" : "FP32"), proto::TRAIN, 1, gpu};
        auto kernel = KernelRegistry::get().create(init);
        kernel->reshape({xs}, {ys});
        kernel->prepare({xs}, {ys});
        Device d = gpu.device();
        Tensor x = random_on(xs, d, 1), w = random_on(ws, d, 2), b({k.oc}, DType::f32, d), y(ys, DType::f32, d);
        Tensor dy = random_on(ys, d, 3), dx(xs, DType::f32, d), dw(ws, DType::f32, d), db({k.oc}, DType::f32, d);
        OpCall c;
        c.in = {&x};
        c.out = {&y};
        c.params = {&w, &b};
        c.out_grad = {&dy};
        c.in_grad = {&dx};
        c.param_grad = {&dw, &db};
        double fwd = time_ms(gpu.stream(), [&] { kernel->forward(c); });
        double bwd = time_ms(gpu.stream(), [&] { kernel->backward(c); });
        double flops = 2.0 * n * k.oc * o * o * k.c * k.k * k.k;
        fmt::print("{:<24} {:>5} {:>5} {:>9.3f} {:>8.1f} {:>9.3f} {:>8.1f}  {}\n", k.name, n, tf32 ? "TF32" : "FP32",
                   fwd, flops / fwd / 1e9, bwd, 2 * flops / bwd / 1e9, kernel->tuning_decision());
      }
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "gpu_conv_bench: {}\n", e.what());
  return 1;
}
