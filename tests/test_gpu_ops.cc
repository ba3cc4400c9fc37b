// The GPU kernels against the CPU's, op by op, on the same random inputs, parameters and
// output gradients (in the spirit of ggml's test-backend-ops): forward outputs, input
// gradients and parameter gradients must agree to FP32 rounding. TF32 is off, as it is by
// default, so a kernel that slipped into TF32 fails here. Without a GPU every case says
// "skipped: no GPU"; the CUDA code is still built, so it cannot rot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/accelerator.h"
#include "core/device_memory.h"
#include "core/worse.h"
#include "cuda/cuda_backend.h"
#include "op_harness.h"
#include "train/trainer.h"

namespace bks::test {
namespace {

bool have_gpu() { return cuda::gpu_count() > 0; }

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "skipped: no GPU"

// Largest |a - b| / max(1, |a|, |b|) over the elements; the shapes must match.
double max_rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.f32()[i], y = b.f32()[i];
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    worst = worse(worst, std::fabs(x - y) / std::max({1.0, std::fabs(x), std::fabs(y)}));
  }
  return worst;
}

struct GpuCase {
  std::string name;
  std::string layer;
  std::vector<Shape> in;
  double tol = 1e-4;
};

std::ostream& operator<<(std::ostream& o, const GpuCase& c) { return o << c.name; }

// A device tensor of shape s full of NaN: what a kernel must overwrite, never read.
Tensor nan_on(const Shape& s, Device d) {
  Tensor h(s);
  h.fill(NAN);
  return to_device(h, d);
}

// Runs the layer's preferred CUDA kernel on copies of a CPU harness's tensors. Outputs and
// gradients start as NaN, so a kernel that adds onto them (cuBLAS's or cuDNN's beta = 1
// where 0 is meant) or leaves part of them unwritten fails the comparison.
struct GpuRun {
  GpuRun(OpHarness& cpu, cuda::CudaBackend& gpu, Phase phase = proto::TRAIN) {
    OpInit init{cpu.node(), "test:gpu:" + cpu.node().name, phase, kHarnessSeed, gpu};
    kernel = KernelRegistry::get().create(init);
    std::vector<Shape> in_shapes, out_shapes;
    for (auto& t : cpu.in) in_shapes.push_back(t.shape());
    for (auto& t : cpu.out) out_shapes.push_back(t.shape());
    kernel->reshape(in_shapes, out_shapes);
    kernel->prepare(in_shapes, out_shapes);
    Device d = gpu.device();
    for (auto& t : cpu.in) in.push_back(to_device(t, d));
    for (auto& t : cpu.params) params.push_back(to_device(t, d));
    for (auto& t : cpu.out) out.push_back(nan_on(t.shape(), d));
    for (auto& t : cpu.out_grad) out_grad.push_back(to_device(t, d));
    for (auto& t : cpu.in) in_grad.push_back(nan_on(t.shape(), d));
    for (auto& t : cpu.param_grad) param_grad.push_back(t.defined() ? nan_on(t.shape(), d) : Tensor());
    for (auto& t : in) call.in.push_back(&t);
    for (auto& t : out) call.out.push_back(&t);
    for (auto& t : params) call.params.push_back(&t);
    for (auto& t : out_grad) call.out_grad.push_back(&t);
    for (size_t i = 0; i < in_grad.size(); ++i)
      call.in_grad.push_back(cpu.can_propagate_to(static_cast<int>(i)) ? &in_grad[i] : nullptr);
    for (auto& t : param_grad) call.param_grad.push_back(t.defined() ? &t : nullptr);
  }
  std::unique_ptr<Kernel> kernel;
  std::vector<Tensor> in, out, params, out_grad, in_grad, param_grad;
  OpCall call;
};

Tensor to_cpu(const Tensor& t) { return to_device(t, Device{}); }

class GpuOps : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuOps, MatchesTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  const GpuCase& k = GetParam();
  OpHarness cpu(k.layer, k.in);
  cpu.forward();
  cpu.backward();
  cuda::CudaBackend gpu(0);
  GpuRun g(cpu, gpu);
  g.kernel->forward(g.call);
  g.kernel->backward(g.call);
  gpu.synchronize();
  std::string report = g.kernel->reported_name() + ":";
  auto compare = [&](const Tensor& want, const Tensor& got, const std::string& what) {
    double e = max_rel_error(want, to_cpu(got));
    report += " " + what + " " + fmt::format("{:.1e}", e);
    EXPECT_LE(e, k.tol) << k.name << ": " << what;
  };
  for (size_t j = 0; j < cpu.out.size(); ++j) compare(cpu.out[j], g.out[j], "out" + std::to_string(j));
  for (size_t i = 0; i < cpu.in.size(); ++i)
    if (g.call.in_grad[i]) compare(cpu.in_grad[i], g.in_grad[i], "d_in" + std::to_string(i));
  for (size_t p = 0; p < cpu.param_grad.size(); ++p)
    if (cpu.param_grad[p].defined()) compare(cpu.param_grad[p], g.param_grad[p], "d_param" + std::to_string(p));
  std::printf("  %s %s\n", k.name.c_str(), report.c_str());
}

const std::string kConv = "type: 'Convolution' convolution_param { weight_filler { type: 'gaussian' } ";

INSTANTIATE_TEST_SUITE_P(
    Ops, GpuOps,
    ::testing::Values(
        GpuCase{"conv_3x3_pad1", kConv + "num_output: 16 kernel_size: 3 pad: 1 }", {{2, 8, 12, 12}}, 2e-4},
        GpuCase{"conv_lenet_5x5", kConv + "num_output: 20 kernel_size: 5 }", {{4, 1, 28, 28}}, 2e-4},
        GpuCase{"conv_stride2_dilated",
                kConv + "num_output: 6 kernel_size: 3 stride: 2 dilation: 2 pad: 2 }",
                {{2, 4, 15, 13}},
                2e-4},
        GpuCase{"conv_grouped", kConv + "num_output: 8 kernel_size: 3 group: 4 pad: 1 }", {{2, 8, 9, 9}}, 2e-4},
        GpuCase{"conv_depthwise", kConv + "num_output: 8 kernel_size: 3 group: 8 pad: 1 }", {{2, 8, 9, 9}}, 2e-4},
        GpuCase{"conv_1x1_nobias", kConv + "num_output: 32 kernel_size: 1 bias_term: false }", {{2, 64, 7, 7}}, 2e-4},
        GpuCase{"conv_rect",
                kConv + "num_output: 5 kernel_h: 1 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 0 pad_w: 1 }",
                {{2, 3, 8, 10}},
                2e-4},
        GpuCase{"pool_max_2x2", "type: 'Pooling' pooling_param { pool: MAX kernel_size: 2 stride: 2 }", {{2, 3, 8, 8}}},
        GpuCase{"pool_ave_3x3_pad1",
                "type: 'Pooling' pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }",
                {{2, 3, 13, 13}}},
        GpuCase{"pool_max_3x3_s1",
                "type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 }",
                {{1, 4, 7, 9}}},
        GpuCase{"pool_global_ave", "type: 'Pooling' pooling_param { pool: AVE global_pooling: true }", {{2, 6, 7, 7}}},
        GpuCase{"ip",
                "type: 'InnerProduct' inner_product_param { num_output: 10 weight_filler { type: 'gaussian' } }",
                {{4, 3, 5, 5}}},
        GpuCase{"ip_transposed",
                "type: 'InnerProduct' inner_product_param { num_output: 7 transpose: true bias_term: false }",
                {{3, 20}}},
        GpuCase{"ip_axis2", "type: 'InnerProduct' inner_product_param { num_output: 6 axis: 2 }", {{2, 3, 4, 5}}},
        GpuCase{"relu", "type: 'ReLU'", {{2, 3, 4, 5}}},
        GpuCase{"relu_leaky", "type: 'ReLU' relu_param { negative_slope: 0.1 }", {{2, 3, 4, 5}}},
        GpuCase{"sigmoid", "type: 'Sigmoid'", {{2, 3, 4, 5}}}, GpuCase{"tanh", "type: 'TanH'", {{2, 3, 4, 5}}},
        GpuCase{"softmax", "type: 'Softmax'", {{3, 10}}},
        GpuCase{"softmax_spatial", "type: 'Softmax' softmax_param { axis: 1 }", {{2, 5, 3, 4}}},
        GpuCase{"softmax_axis2", "type: 'Softmax' softmax_param { axis: 2 }", {{2, 3, 6, 2}}}),
    [](const ::testing::TestParamInfo<GpuCase>& i) { return i.param.name; });

// In place, as the planner runs ReLU: the output is the input's buffer.
TEST(Gpu, ReLUInPlaceMatchesOutOfPlace) {
  SKIP_WITHOUT_GPU();
  OpHarness cpu("type: 'ReLU' relu_param { negative_slope: 0.2 }", {{3, 50}});
  cpu.forward();
  cuda::CudaBackend gpu(0);
  GpuRun g(cpu, gpu);
  g.call.out[0] = &g.in[0];
  g.kernel->forward(g.call);
  EXPECT_LE(max_rel_error(cpu.out[0], to_cpu(g.in[0])), 0.0);
}

// TF32 is off unless asked: an inner product over 4096 inputs matches the CPU to FP32
// rounding (3.6e-5 on an H200: another summation order), and with TF32 on it is off by
// over ten times that (1.3e-2 there: the switch reaches cuBLAS).
TEST(Gpu, Tf32IsOffUnlessAsked) {
  SKIP_WITHOUT_GPU();
  OpHarness cpu("type: 'InnerProduct' inner_product_param { num_output: 64 }", {{32, 4096}});
  cpu.forward();
  cuda::CudaBackend gpu(0);
  double err[2];
  for (int tf32 = 0; tf32 < 2; ++tf32) {
    gpu.set_tf32(tf32 == 1);
    GpuRun g(cpu, gpu);
    g.kernel->forward(g.call);
    err[tf32] = max_rel_error(cpu.out[0], to_cpu(g.out[0]));
  }
  std::printf("  FP32 error %.2e, TF32 error %.2e\n", err[0], err[1]);
  EXPECT_LE(err[0], 1e-4);
  EXPECT_GT(err[1], 10 * err[0]);
}

// cuDNN's implicit precomputed GEMM (forward algorithm 1) can add the bias in the same pass
// (cudnnConvolutionBiasActivationForward): forced here, fused and not, with FP32 and with
// TF32 math, the result is still the CPU's (to FP32 and to TF32 rounding).
TEST(Gpu, ConvolutionWithFusedBiasMatches) {
  SKIP_WITHOUT_GPU();
  setenv("BKS_CUDNN_FWD_ALGO", "1", 1);
  for (int k = 0; k < 4; ++k) {
    const bool tf32 = k & 1, fused = k & 2;
    setenv("BKS_CUDNN_FUSED_BIAS", fused ? "1" : "0", 1);
    // A shape per case: choices are cached per shape.
    OpHarness cpu(kConv + "num_output: 32 kernel_size: 3 pad: 1 }", {{4, 16, 14, 14 + k}});
    cpu.forward();
    cuda::CudaBackend gpu(0);
    gpu.set_tf32(tf32);
    GpuRun g(cpu, gpu);
    g.kernel->forward(g.call);
    const double out = max_rel_error(cpu.out[0], to_cpu(g.out[0]));
    std::printf("  %s %s: out %.1e\n", tf32 ? "TF32" : "FP32", g.kernel->reported_name().c_str(), out);
    EXPECT_NE(g.kernel->reported_name().find("fwd 1"), std::string::npos) << "algorithm 1 was not chosen";
    EXPECT_EQ(g.kernel->reported_name().find("fused bias") != std::string::npos, fused) << g.kernel->reported_name();
    EXPECT_LE(out, tf32 ? 1e-2 : 1e-4);
  }
  unsetenv("BKS_CUDNN_FWD_ALGO");
  unsetenv("BKS_CUDNN_FUSED_BIAS");
}

// A steady-state step allocates nothing from the device: the second round of the same
// tensors comes entirely from the cache.
TEST(Gpu, CachingAllocatorReusesBlocks) {
  SKIP_WITHOUT_GPU();
  Device d{DeviceKind::cuda, 0};
  auto round = [&] {
    std::vector<Tensor> ts;
    for (int64_t n : {1, 1000, 300000, 5000000}) ts.emplace_back(Shape{n}, DType::f32, d);
  };
  round();
  cuda::AllocatorStats before = cuda::allocator_stats(0);
  for (int i = 0; i < 5; ++i) round();
  cuda::AllocatorStats after = cuda::allocator_stats(0);
  EXPECT_EQ(after.device_allocations, before.device_allocations);
  EXPECT_GE(after.reuses, before.reuses + 20);
}

// Host to device and back keeps every bit; zero() clears device memory.
TEST(Gpu, CopiesRoundTrip) {
  SKIP_WITHOUT_GPU();
  Tensor h({3, 7});
  for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = 0.25f * static_cast<float>(i) - 1.f;
  Tensor d = to_device(h, Device{DeviceKind::cuda, 0});
  EXPECT_EQ(d.device().kind, DeviceKind::cuda);
  EXPECT_EQ(max_rel_error(h, to_cpu(d.clone())), 0.0);
  d.zero();
  Tensor z = to_cpu(d);
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.f32()[i], 0.f);
}

// Asking for a GPU that is not there is a plain error, with or without GPUs.
TEST(Gpu, MissingGpuIsAClearError) {
  int n = cuda::gpu_count();
  try {
    make_gpu_backend(n);  // one past the last
    FAIL() << "GPU " << n << " should not exist";
  } catch (const RuntimeError& e) {
    std::string m = e.what();
    if (n == 0)
      EXPECT_NE(m.find("no GPU"), std::string::npos) << m;
    else
      EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
  }
}

namespace fs = std::filesystem;

// Caffe's LeNet solver on Fashion-MNIST for `iters` iterations, on GPU 0 or the CPU (-1),
// from `snapshot` when given; the data from BKS_FASHION_MNIST or Debian's package.
TrainResult train_lenet(int gpu, int64_t iters, const std::string& out, const std::string& snapshot = "") {
  const char* env = std::getenv("BKS_FASHION_MNIST");
  const std::string data = env ? env : "/usr/share/datasets/fashion-mnist";
  const char* src = std::getenv("BKS_SOURCE_DIR");  // the checkout, where it moved since the build
  std::ifstream in(std::string(src ? src : BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt");
  std::stringstream text;
  text << in.rdbuf();
  std::string net = text.str();
  for (size_t p; (p = net.find("/usr/share/datasets/fashion-mnist")) != std::string::npos;)
    net.replace(p, std::strlen("/usr/share/datasets/fashion-mnist"), data);
  const fs::path dir = fs::temp_directory_path() / "bks_gpu_lenet";
  fs::create_directories(dir);
  std::ofstream(dir / "net.prototxt") << net;
  std::ofstream(dir / (out + "_solver.prototxt"))
      << "net: '" << (dir / "net.prototxt").string() << "'\ntest_iter: 100 test_interval: 500 base_lr: 0.01\n"
      << "momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 power: 0.75 snapshot: 500\n"
      << "random_seed: 1 max_iter: " << iters << "\n";
  TrainOptions o;
  o.solver = (dir / (out + "_solver.prototxt")).string();
  o.out_dir = (dir / out).string();
  o.snapshot = snapshot;
  o.gpu = gpu;
  o.progress = false;
  if (snapshot.empty()) fs::remove_all(o.out_dir);
  return train(o);
}

// Issue 17's check: LeNet trained for 1,000 iterations on the GPU reaches the CPU run's
// test accuracy within half a point; and a GPU snapshot resumed on the CPU (the snapshot
// format is the device's business of neither) ends within half a point as well.
TEST(Gpu, LenetTrainsAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const char* env = std::getenv("BKS_FASHION_MNIST");
  if (!fs::exists(fs::path(env ? env : "/usr/share/datasets/fashion-mnist") / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "skipped: no Fashion-MNIST (BKS_FASHION_MNIST)";
  TrainResult cpu = train_lenet(-1, 1000, "cpu");
  TrainResult gpu = train_lenet(0, 1000, "gpu");
  TrainResult half = train_lenet(0, 500, "resumed");
  ASSERT_FALSE(half.last_snapshot.empty());
  TrainResult resumed = train_lenet(-1, 1000, "resumed", half.last_snapshot);
  const double a_cpu = cpu.last_test.at("accuracy"), a_gpu = gpu.last_test.at("accuracy"),
               a_res = resumed.last_test.at("accuracy");
  std::printf("  LeNet, 1000 iterations: CPU %.4f (%.0f images/s), GPU %.4f (%.0f images/s), GPU 500 + CPU 500 %.4f\n",
              a_cpu, cpu.images_per_s, a_gpu, gpu.images_per_s, a_res);
  EXPECT_GT(a_cpu, 0.7);
  EXPECT_NEAR(a_gpu, a_cpu, 0.005);
  EXPECT_NEAR(a_res, a_gpu, 0.005);
}

}  // namespace
}  // namespace bks::test
