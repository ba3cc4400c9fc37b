// Convolution on the GPU through cuDNN: forward, backward-data and backward-filter, grouped
// and dilated, with each direction's algorithm chosen by measurement (cudnnFind*) once per
// shape and kept for the process, among those whose scratch memory fits the backend's
// workspace limit. With TF32 off (the default) only FP32-FMA algorithms are candidates, so
// results match the CPU's to rounding. The bias is added by cuDNN as well.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "cuda/cuda_check.h"
#include "cuda/cudnn_desc.h"
#include "cuda/gpu_kernel.h"
#include "ops/conv_attrs.h"

namespace bks::cuda {

namespace {

struct ConvAlgos {
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
  size_t workspace = 0;
  bool fused_bias = false;  // the forward adds the bias in the convolution's pass
  std::string summary;
};

// Choices by (shapes, geometry, TF32, workspace limit): measured once per process.
std::mutex g_cache_mu;
std::map<std::string, ConvAlgos> g_cache;

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conv";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

// The fastest measured result that succeeded, fits `limit` and uses allowed math (only
// algorithm `only` when that is not -1). Every candidate cuDNN measured is logged at -v
// (time, workspace, math), with the choice.
template <class Perf>
const Perf* pick(const Perf* perf, int n, size_t limit, bool tf32, const std::string& what, const std::string& where,
                 int only = -1) {
  const Perf* chosen = nullptr;
  std::string seen;
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    seen += fmt::format(" [{} {:.3f} ms {} MB {}]", static_cast<int>(p.algo), p.time, p.memory >> 20,
                        math_name(p.mathType));
    if (chosen || p.memory > limit || (only >= 0 && static_cast<int>(p.algo) != only)) continue;
    if (!tf32 && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
    chosen = &p;
  }
  if (!chosen)
    runtime_error(
        "{}: cuDNN has no {} algorithm for this convolution within the {} MB workspace limit "
        "(BKS_CUDNN_WORKSPACE_MB)",
        where, what, limit >> 20);
  log::debug("{}: cuDNN {} algorithm {} of:{}", where, what, static_cast<int>(chosen->algo), seen);
  return chosen;
}

class ConvolutionCudnn final : public GpuKernel {
 public:
  explicit ConvolutionCudnn(const OpInit& i) : GpuKernel(i), a_(i.node.attrs.as<ConvAttrs>()) {
    BKS_CUDNN_CALL(cudnnSetActivationDescriptor(identity_, CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    const Shape& x = in[0];
    const Shape& y = out[0];
    int64_t g = a_.group;
    x_.set(x);
    y_.set(y);
    w_.set(a_.num_output, x[1] / g, a_.kernel[0], a_.kernel[1]);
    if (a_.bias_term) b_.set(1, a_.num_output, 1, 1);
    BKS_CUDNN_CALL(cudnnSetConvolution2dDescriptor(
        conv_, cudnn_dim(a_.pad[0]), cudnn_dim(a_.pad[1]), cudnn_dim(a_.stride[0]), cudnn_dim(a_.stride[1]),
        cudnn_dim(a_.dilation[0]), cudnn_dim(a_.dilation[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BKS_CUDNN_CALL(cudnnSetConvolutionGroupCount(conv_, cudnn_dim(g)));
    std::string key = fmt::format("{}>{} k{} s{} p{} d{} g{} tf32 {} ws {}", shape_str(x), shape_str(y),
                                  fmt::join(a_.kernel, "x"), fmt::join(a_.stride, "x"), fmt::join(a_.pad, "x"),
                                  fmt::join(a_.dilation, "x"), g, gpu_.tf32(), gpu_.workspace_limit());
    {
      std::lock_guard<std::mutex> lock(g_cache_mu);
      auto it = g_cache.find(key);
      if (it != g_cache.end()) {
        algos_ = it->second;
        return;
      }
    }
    algos_ = measure();
    if (a_.bias_term && algos_.fwd == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) {
      // Fusing saves a pass over y but is not always faster (on an H200 it halved a 1x1
      // expansion's time and slowed a 1x1 reduction by a third): measured too.
      const char* force = std::getenv("BKS_CUDNN_FUSED_BIAS");  // 1 or 0: to test either path
      algos_.fused_bias = force ? std::string(force) == "1" : fused_bias_is_faster(x, y);
      if (algos_.fused_bias) algos_.summary = "fused bias " + algos_.summary;
    }
    std::lock_guard<std::mutex> lock(g_cache_mu);
    g_cache[key] = algos_;
  }

  void forward(OpCall& c) override {
    void* ws = gpu_.workspace(algos_.workspace);
    BKS_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, algos_.fwd_math));
    run_forward(c.in[0]->f32(), c.params[0]->f32(), a_.bias_term ? c.params[1]->f32() : nullptr, c.out[0]->f32(), ws,
                algos_.fused_bias);
  }

  void backward(OpCall& c) override {
    const float one = 1.f, zero = 0.f;
    void* ws = gpu_.workspace(algos_.workspace);
    const float* dy = c.out_grad[0]->f32();
    if (a_.bias_term && c.param_grad.size() > 1 && c.param_grad[1])
      BKS_CUDNN_CALL(cudnnConvolutionBackwardBias(gpu_.cudnn(), &one, y_, dy, &zero, b_, c.param_grad[1]->f32()));
    if (c.param_grad[0]) {
      BKS_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, algos_.bwd_filter_math));
      BKS_CUDNN_CALL(cudnnConvolutionBackwardFilter(gpu_.cudnn(), &one, x_, c.in[0]->f32(), y_, dy, conv_,
                                                    algos_.bwd_filter, ws, algos_.workspace, &zero, w_,
                                                    c.param_grad[0]->f32()));
    }
    if (c.in_grad[0]) {
      BKS_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, algos_.bwd_data_math));
      BKS_CUDNN_CALL(cudnnConvolutionBackwardData(gpu_.cudnn(), &one, w_, c.params[0]->f32(), y_, dy, conv_,
                                                  algos_.bwd_data, ws, algos_.workspace, &zero, x_,
                                                  c.in_grad[0]->f32()));
    }
  }

  std::string kernel_name() const override { return "cuDNN " + algos_.summary; }

  // y = conv(x, w) (+ b): the bias in the convolution's pass (cuDNN fuses it for the
  // implicit precomputed GEMM only) or added after it.
  void run_forward(const float* x, const float* w, const float* b, float* y, void* ws, bool fused) {
    const float one = 1.f, zero = 0.f;
    if (b && fused) {
      BKS_CUDNN_CALL(cudnnConvolutionBiasActivationForward(gpu_.cudnn(), &one, x_, x, w_, w, conv_, algos_.fwd, ws,
                                                           algos_.workspace, &zero, y_, y, b_, b, identity_, y_, y));
      return;
    }
    BKS_CUDNN_CALL(cudnnConvolutionForward(gpu_.cudnn(), &one, x_, x, w_, w, conv_, algos_.fwd, ws, algos_.workspace,
                                           &zero, y_, y));
    if (b) BKS_CUDNN_CALL(cudnnAddTensor(gpu_.cudnn(), &one, b_, b, &one, y_, y));
  }

  // Times both forms of the forward on scratch tensors (median of 5 after a warm-up).
  bool fused_bias_is_faster(const Shape& xs, const Shape& ys) {
    const Device d = gpu_.device();
    Tensor x(xs, DType::f32, d), y(ys, DType::f32, d), b({a_.num_output}, DType::f32, d);
    Tensor w({a_.num_output, xs[1] / a_.group, a_.kernel[0], a_.kernel[1]}, DType::f32, d);
    void* ws = gpu_.workspace(algos_.workspace);
    BKS_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, algos_.fwd_math));
    cudaEvent_t start, stop;
    BKS_CUDA_CALL(cudaEventCreate(&start));
    BKS_CUDA_CALL(cudaEventCreate(&stop));
    auto median_ms = [&](bool fused) {
      run_forward(x.f32(), w.f32(), b.f32(), y.f32(), ws, fused);
      std::vector<float> ms;
      for (int i = 0; i < 5; ++i) {
        cudaEventRecord(start, gpu_.stream());
        run_forward(x.f32(), w.f32(), b.f32(), y.f32(), ws, fused);
        cudaEventRecord(stop, gpu_.stream());
        cudaEventSynchronize(stop);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    const float fused = median_ms(true), separate = median_ms(false);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    log::debug("{}: forward with the bias fused {:.3f} ms, added after {:.3f} ms", where(), fused, separate);
    return fused < separate;
  }
  std::string tuning_decision() const override { return algos_.summary; }

 private:
  ConvAlgos measure() {
    bool tf32 = gpu_.tf32();
    size_t limit = gpu_.workspace_limit();
    // FMA math unless TF32 was asked for: cuDNN then measures only algorithms that keep FP32.
    BKS_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    ConvAlgos r;
    constexpr int kMax = 16;
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
    BKS_CUDNN_CALL(cudnnFindConvolutionForwardAlgorithm(gpu_.cudnn(), x_, w_, conv_, y_, kMax, &n, fwd));
    // BKS_CUDNN_FWD_ALGO=N: forward algorithm N only (cudnnConvolutionFwdAlgo_t), to
    // reproduce or test one algorithm's path (the fused bias of algorithm 1).
    const char* only = std::getenv("BKS_CUDNN_FWD_ALGO");
    const auto* f = pick(fwd, n, limit, tf32, "forward", where(), only ? std::atoi(only) : -1);
    r.fwd = f->algo;
    r.fwd_math = tf32 ? f->mathType : CUDNN_FMA_MATH;
    r.workspace = f->memory;
    if (phase() == proto::TRAIN) {
      cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
      BKS_CUDNN_CALL(cudnnFindConvolutionBackwardDataAlgorithm(gpu_.cudnn(), w_, y_, conv_, x_, kMax, &n, bd));
      const auto* d = pick(bd, n, limit, tf32, "backward-data", where());
      r.bwd_data = d->algo;
      r.bwd_data_math = tf32 ? d->mathType : CUDNN_FMA_MATH;
      cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
      BKS_CUDNN_CALL(cudnnFindConvolutionBackwardFilterAlgorithm(gpu_.cudnn(), x_, y_, conv_, w_, kMax, &n, bf));
      const auto* w = pick(bf, n, limit, tf32, "backward-filter", where());
      r.bwd_filter = w->algo;
      r.bwd_filter_math = tf32 ? w->mathType : CUDNN_FMA_MATH;
      r.workspace = std::max({r.workspace, d->memory, w->memory});
      r.summary = fmt::format("fwd {} bwd-data {} bwd-filter {}", static_cast<int>(r.fwd), static_cast<int>(r.bwd_data),
                              static_cast<int>(r.bwd_filter));
    } else {
      r.summary = fmt::format("fwd {}", static_cast<int>(r.fwd));
    }
    return r;
  }

  const ConvAttrs& a_;
  TensorDesc x_, y_, b_;
  FilterDesc w_;
  ConvDesc conv_;
  ActivationDesc identity_;  // the fused forward's "activation": none
  ConvAlgos algos_;
};

// One input and output of 4 dimensions, channels on axis 1 (what cuDNN's 2-d descriptors
// describe); other convolutions have no GPU kernel yet.
bool supports(const OpInit& i) {
  const ConvAttrs& a = i.node.attrs.as<ConvAttrs>();
  return i.node.inputs.size() == 1 && i.node.outputs.size() == 1 && a.kernel.size() == 2 && a.axis == 1;
}

}  // namespace

BKS_REGISTER_KERNEL("Convolution", DeviceKind::cuda, ConvolutionCudnn, "cuDNN", 10, supports);

}  // namespace bks::cuda
