// Deconvolution as GEMM + col2im, the formulation Caffe uses, for the passes oneDNN has no
// fast kernel for. oneDNN 2.6 runs reference loops for some passes of large strides:
// FCN-32s' upscore forward (kernel 64, stride 32; its convolution backward-data) and
// FCN-8s' upscore8 weight gradient (kernel 16, stride 8) on AVX2, upscore8's forward too on
// AVX-512 (110 s for one 500x500 image); here they take 15-25 ms. Each image and group is
//   patches[p][(co, i, j)] = sum over ci of x[ci][p] * w[ci][(co, i, j)]   (one sgemm)
// followed by scattering the patch rows into the output (patches.h), over blocks of input
// positions small enough to stay in cache. Backward gathers the output gradient into the
// same patch rows once and reads them twice: the input gradient w * patches^T and the
// weight gradient x * patches (both sgemm).
//
// Where oneDNN has a fast kernel it is faster than this (depthwise and stride-1 shapes),
// so the kernel production picks ("oneDNN+gemm") asks oneDNN first, per pass (forward,
// input gradient, weight gradient), and runs sgemm + col2im only for the passes oneDNN
// would run a reference implementation for. supports() cannot decide this: it sees the
// node, not its shapes. "gemm" runs every pass through sgemm (tests, the sweep).
// Figures: docs/benchmarks.md.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "ops/conv_kernels.h"
#include "ops/op.h"
#include "ops/patches.h"

namespace bks {
namespace {

// Patch-matrix floats per block (4 MiB): large enough that each sgemm has work for every
// thread, small enough to be read back from cache by the scatter.
constexpr int64_t kBlockFloats = int64_t{1} << 20;

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  dnnl::status s = dnnl::sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
  BKS_CHECK(s == dnnl::status::success, "dnnl_sgemm {}x{}x{} failed ({})", m, n, k, static_cast<int>(s));
}

// Which passes run through sgemm.
struct GemmPasses {
  bool forward = true, input_grad = true, weight_grad = true;
  bool any() const { return forward || input_grad || weight_grad; }
  bool all() const { return forward && input_grad && weight_grad; }
};

class DeconvolutionGemm : public Kernel {
 public:
  // pick: ask oneDNN first and use sgemm only where it would run a reference kernel.
  DeconvolutionGemm(const OpInit& i, bool pick)
      : Kernel(i), window_(parse_conv_layer(context())), bias_(i.node.attrs.as<ConvAttrs>().bias_term), pick_(pick) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    const ConvGeometry& w = window_;
    n_ = in[0][0];
    group_ = w.group;
    cin_g_ = in[0][1] / group_;
    PatchGeometry& g = patches_;
    g.channels = out[0][1] / group_;
    g.height = out[0][2];
    g.width = out[0][3];
    g.grid_h = in[0][2];
    g.grid_w = in[0][3];
    g.kh = w.kh, g.kw = w.kw, g.sh = w.sh, g.sw = w.sw, g.ph = w.ph, g.pw = w.pw, g.dh = w.dh, g.dw = w.dw;
    block_ = std::clamp<int64_t>(kBlockFloats / g.row_size(), 1, std::max<int64_t>(1, g.positions()));
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    passes_ = GemmPasses{};
    onednn_.reset();
    if (pick_) {
      // What the oneDNN kernel would build, watched in isolation: its reference primitives
      // are replaced here, so they are not this node's slow paths.
      auto k = std::make_unique<ConvKernels>();
      DnnlReferenceWatch probe(/*isolated=*/true);
      k->prepare(static_cast<CpuBackend&>(backend_).engine(), conv_geometry(), false, true);
      passes_ = {false, false, false};
      for (const std::string& f : probe.found()) {
        if (f.find("backward-data") != std::string::npos)
          passes_.forward = true;  // the deconvolution's forward is the convolution's backward-data
        else if (f.find("backward-weights") != std::string::npos)
          passes_.weight_grad = true;
        else
          passes_.input_grad = true;
      }
      if (!passes_.all()) onednn_ = std::move(k);
    }
    // The only buffer: one block of patch rows, allocated here, never per step.
    buffer_.assign(passes_.any() ? static_cast<size_t>(block_ * patches_.row_size()) : 0, 0.f);
  }

  void forward(OpCall& c) override {
    const PatchGeometry& g = patches_;
    const int64_t positions = g.positions(), row = g.row_size(), plane = g.height * g.width;
    const float *x = c.in[0]->f32(), *w = c.params[0]->f32();
    const float* b = bias_ ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    const int64_t cout = g.channels * group_;
    if (!passes_.forward) {
      onednn_->backward_data(stream(), x, w, y);
      if (b) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t n = 0; n < n_; ++n)
          for (int64_t ch = 0; ch < cout; ++ch) {
            float* p = y + (n * cout + ch) * plane;
            for (int64_t i = 0; i < plane; ++i) p[i] += b[ch];
          }
      }
      return;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t ch = 0; ch < cout; ++ch) std::fill_n(y + (n * cout + ch) * plane, plane, b ? b[ch] : 0.f);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t gi = 0; gi < group_; ++gi) {
        const float* xg = x + (n * group_ + gi) * cin_g_ * positions;
        const float* wg = w + gi * cin_g_ * row;
        float* yg = y + (n * group_ + gi) * g.channels * plane;
        for (int64_t p0 = 0; p0 < positions; p0 += block_) {
          const int64_t p1 = std::min(positions, p0 + block_);
          // buffer[p - p0][r] = sum over ci of xg[ci][p] * wg[ci][r]
          sgemm('T', 'N', p1 - p0, row, cin_g_, xg + p0, positions, wg, row, 0.f, buffer_.data(), row);
          scatter_add_patches(g, buffer_.data(), p0, p1, yg);
        }
      }
  }

  void backward(OpCall& c) override {
    const PatchGeometry& g = patches_;
    const int64_t positions = g.positions(), row = g.row_size(), plane = g.height * g.width;
    const int64_t cout = g.channels * group_;
    const float *x = c.in[0]->f32(), *w = c.params[0]->f32(), *dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr;
    float* dw = c.param_grad[0] ? c.param_grad[0]->f32() : nullptr;
    if (bias_ && c.param_grad[1]) {
      float* db = c.param_grad[1]->f32();
#pragma omp parallel for schedule(static)
      for (int64_t ch = 0; ch < cout; ++ch) {
        double acc = 0;
        for (int64_t n = 0; n < n_; ++n) {
          const float* p = dy + (n * cout + ch) * plane;
          for (int64_t i = 0; i < plane; ++i) acc += p[i];
        }
        db[ch] = static_cast<float>(acc);
      }
    }
    if (dx && !passes_.input_grad) {
      onednn_->forward(stream(), dy, w, nullptr, dx);
      dx = nullptr;
    }
    if (dw && !passes_.weight_grad) {
      onednn_->backward_weights(stream(), dy, x, dw, nullptr);
      dw = nullptr;
    }
    if (!dx && !dw) return;
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t gi = 0; gi < group_; ++gi) {
        const float* xg = x + (n * group_ + gi) * cin_g_ * positions;
        const float* wg = w + gi * cin_g_ * row;
        const float* dyg = dy + (n * group_ + gi) * g.channels * plane;
        for (int64_t p0 = 0; p0 < positions; p0 += block_) {
          const int64_t p1 = std::min(positions, p0 + block_);
          gather_patches(g, dyg, p0, p1, buffer_.data());
          // dx[ci][p] = sum over r of wg[ci][r] * buffer[p - p0][r]
          if (dx)
            sgemm('N', 'T', cin_g_, p1 - p0, row, wg, row, buffer_.data(), row, 0.f,
                  dx + (n * group_ + gi) * cin_g_ * positions + p0, positions);
          // dw[ci][r] += sum over p of xg[ci][p] * buffer[p - p0][r] (overwritten at first)
          if (dw)
            sgemm('N', 'N', cin_g_, row, p1 - p0, xg + p0, positions, buffer_.data(), row,
                  n == 0 && p0 == 0 ? 0.f : 1.f, dw + gi * cin_g_ * row, row);
        }
      }
  }

  std::string kernel_name() const override {
    std::string gemm = fmt::format("sgemm + col2im ({} positions a block)", std::min(block_, patches_.positions()));
    if (passes_.all()) return gemm;
    if (!passes_.any()) return "oneDNN " + onednn_->name();
    auto pass = [&](bool g) { return g ? gemm : "oneDNN"; };
    return fmt::format("forward {}, input gradient {}, weight gradient {} (oneDNN: {})", pass(passes_.forward),
                       pass(passes_.input_grad), pass(passes_.weight_grad), onednn_->name());
  }

 private:
  dnnl::stream& stream() { return static_cast<CpuBackend&>(backend_).stream(); }

  // The convolution oneDNN computes the deconvolution with: from the deconvolution's
  // output (src) to its input (dst).
  ConvGeometry conv_geometry() const {
    ConvGeometry g = window_;
    g.n = n_;
    g.c = patches_.channels * group_;
    g.h = patches_.height;
    g.w = patches_.width;
    g.oc = cin_g_ * group_;
    g.oh = patches_.grid_h;
    g.ow = patches_.grid_w;
    return g;
  }

  ConvGeometry window_;  // kernel, stride, pad, dilation, group; shapes from reshape()
  bool bias_, pick_;
  GemmPasses passes_;
  std::unique_ptr<ConvKernels> onednn_;  // the passes oneDNN runs fast, when there are any
  int64_t n_ = 0, group_ = 1, cin_g_ = 0, block_ = 1;
  PatchGeometry patches_;  // the output image of one group, the input grid
  std::vector<float> buffer_;
};

class DeconvolutionPicked final : public DeconvolutionGemm {
 public:
  explicit DeconvolutionPicked(const OpInit& i) : DeconvolutionGemm(i, true) {}
};

class DeconvolutionAllGemm final : public DeconvolutionGemm {
 public:
  explicit DeconvolutionAllGemm(const OpInit& i) : DeconvolutionGemm(i, false) {}
};

// Post-ops, bf16 and INT8 (deploy's decisions) stay with the oneDNN kernel.
bool gemm_supports(const OpInit& i) { return !i.node.deploy.fusion.any(); }

}  // namespace

// Above the oneDNN kernel (10), which it replaces where oneDNN has only a reference.
BKS_REGISTER_KERNEL("Deconvolution", ::bks::DeviceKind::cpu, DeconvolutionPicked, "oneDNN+gemm", 20, gemm_supports);
// Every pass through sgemm; never preferred (below oneDNN), for tests and comparisons.
BKS_REGISTER_KERNEL("Deconvolution", ::bks::DeviceKind::cpu, DeconvolutionAllGemm, "gemm", 5, gemm_supports);

}  // namespace bks
