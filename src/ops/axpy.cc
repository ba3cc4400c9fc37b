// Axpy (the SENet fork, hujie-frank/SENet): bottoms (a, x, y) with a of N x C (or
// N x C x 1 x 1, an SE block's channel weights) and x, y of one shape N x C x ...; the top
// is a[n][c] * x + y, a broadcast over each channel's plane. It fuses the SE block's Scale
// and the residual Eltwise SUM. Gradients: da = sum over the plane of dtop * x,
// dx = a * dtop, dy = dtop.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

class AxpyDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 3; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    const Shape &a = in[0], &x = in[1], &y = in[2];
    OpContext::ChannelSplit s = c.split_channels(x);
    bool scale_ok = a.size() >= 2 && a[0] == s.n && a[1] == s.c && shape_count(a, 2, static_cast<int>(a.size())) == 1;
    if (!scale_ok)
      c.fail("bottom 0 (the scale) must be N x C or N x C x 1 x 1 for bottom 1 of {}, got {}", shape_str(x),
             shape_str(a));
    if (y != x) c.fail("bottom 2 has shape {} but bottom 1 has {}; they must agree", shape_str(y), shape_str(x));
    out[0] = x;
  }
  // Backward reads a and x (for dx and da), never y.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.reads_input_in_backward = {true, true, false};
    return f;
  }
};

class AxpyKernel final : public Kernel {
 public:
  explicit AxpyKernel(const OpInit& i) : Kernel(i) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { s_ = split_channels(in[1]); }

  void forward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* x = c.in[1]->f32();
    const float* y = c.in[2]->f32();
    float* top = c.out[0]->f32();
    const int64_t sp = s_.spatial;
    for_planes([=](int64_t p) {
      const float k = a[p];
      const float *xp = x + p * sp, *yp = y + p * sp;
      float* tp = top + p * sp;
#pragma omp simd
      for (int64_t i = 0; i < sp; ++i) tp[i] = k * xp[i] + yp[i];
    });
  }

  void backward(OpCall& c) override {
    const float* dtop = c.out_grad[0]->f32();
    const float* a = c.in[0]->f32();
    const float* x = c.in[1]->f32();
    const int64_t sp = s_.spatial;
    if (float* da = c.in_grad[0] ? c.in_grad[0]->f32() : nullptr) {
      for_planes([=](int64_t p) {
        const float *g = dtop + p * sp, *xp = x + p * sp;
        double sum = 0;
        for (int64_t i = 0; i < sp; ++i) sum += static_cast<double>(g[i]) * xp[i];
        da[p] = static_cast<float>(sum);
      });
    }
    if (float* dx = c.in_grad[1] ? c.in_grad[1]->f32() : nullptr) {
      for_planes([=](int64_t p) {
        const float k = a[p];
        const float* g = dtop + p * sp;
        float* d = dx + p * sp;
#pragma omp simd
        for (int64_t i = 0; i < sp; ++i) d[i] = k * g[i];
      });
    }
    if (c.in_grad[2])
      std::memcpy(c.in_grad[2]->f32(), dtop, static_cast<size_t>(c.out_grad[0]->numel()) * sizeof(float));
  }

 private:
  // body(p) for each (n, c) plane p, split across the threads when the tensor is large.
  template <class Body>
  void for_planes(Body body) const {
    const int64_t planes = s_.n * s_.c;
    parallel_ranges(
        planes,
        [&](int64_t lo, int64_t hi) {
          for (int64_t p = lo; p < hi; ++p) body(p);
        },
        s_.spatial > 0 ? std::max<int64_t>(kSerialBelow / s_.spatial, 1) : planes + 1);
  }
  ChannelSplit s_{};
};

}  // namespace

BKS_REGISTER_OP_DEF("Axpy", AxpyDef);
BKS_REGISTER_KERNEL("Axpy", ::bks::DeviceKind::cpu, AxpyKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
