// BatchMatMul: C = A B of two bottoms, A [..., m, k] and B [..., k, n], one product per
// index of the leading (batch) axes, which broadcast as NumPy's matmul does (ONNX MatMul
// of two computed tensors: attention's Q K^T and its weights times V). InnerProduct stays
// the op for a product with constant weights.
//
// The loops are the reference: row-times-matrix updates whose inner loop runs along
// contiguous rows of B and C, so the compiler vectorises it.
#include <algorithm>
#include <cstring>

#include "ops/broadcast.h"
#include "ops/op.h"

namespace bks {
namespace {

struct Geometry {
  Shape batch;  // the output's batch axes
  int64_t m = 0, k = 0, n = 0;
};

Geometry geometry(const OpContext& c, const Shape& a, const Shape& b) {
  if (a.size() < 2 || b.size() < 2)
    c.fail("bottoms {} and {} must have 2 or more axes (matrices, or batches of them)", shape_str(a), shape_str(b));
  Geometry g;
  g.m = a[a.size() - 2];
  g.k = a.back();
  g.n = b.back();
  if (b[b.size() - 2] != g.k)
    c.fail("{} times {}: the inner sizes {} and {} differ", shape_str(a), shape_str(b), g.k, b[b.size() - 2]);
  if (!broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), g.batch))
    c.fail("the batch axes of {} and {} do not broadcast", shape_str(a), shape_str(b));
  return g;
}

class BatchMatMulDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    Geometry g = geometry(c, in[0], in[1]);
    out[0] = g.batch;
    out[0].push_back(g.m);
    out[0].push_back(g.n);
  }
};

class BatchMatMulKernel final : public Kernel {
 public:
  explicit BatchMatMulKernel(const OpInit& i) : Kernel(i) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = geometry(context(), in[0], in[1]);
    // Which matrix of A and of B each output matrix reads.
    for (int j = 0; j < 2; ++j) {
      mat_[j] = broadcast_index(Shape(in[j].begin(), in[j].end() - 2), g_.batch);
      shared_[j] = shape_count(in[j], 0, static_cast<int>(in[j].size()) - 2) < shape_numel(g_.batch);
      count_[j] = shape_numel(in[j]);
    }
  }

  void forward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* b = c.in[1]->f32();
    float* y = c.out[0]->f32();
    const int64_t batches = static_cast<int64_t>(mat_[0].size()), m = g_.m, k = g_.k, n = g_.n;
#pragma omp parallel for if (batches * m * n * k > 32768)
    for (int64_t t = 0; t < batches; ++t) {
      std::fill(y + t * m * n, y + (t + 1) * m * n, 0.f);
      gemm_nn(a + mat_[0][t] * m * k, b + mat_[1][t] * k * n, y + t * m * n, m, k, n);
    }
  }

  // dA = dC B^T and dB = A^T dC per product, summed over the products that shared a matrix.
  void backward(OpCall& c) override {
    const float* a = c.in[0]->f32();
    const float* b = c.in[1]->f32();
    const float* dy = c.out_grad[0]->f32();
    const int64_t batches = static_cast<int64_t>(mat_[0].size()), m = g_.m, k = g_.k, n = g_.n;
    if (c.in_grad[0]) {
      float* da = c.in_grad[0]->f32();
      std::fill(da, da + count_[0], 0.f);
#pragma omp parallel for if (!shared_[0] && batches * m * n * k > 32768)
      for (int64_t t = 0; t < batches; ++t) {
        const float* pb = b + mat_[1][t] * k * n;
        const float* pdy = dy + t * m * n;
        float* pda = da + mat_[0][t] * m * k;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) {
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < n; ++j) s += pdy[i * n + j] * pb[p * n + j];
            pda[i * k + p] += s;
          }
      }
    }
    if (c.in_grad[1]) {
      float* db = c.in_grad[1]->f32();
      std::fill(db, db + count_[1], 0.f);
#pragma omp parallel for if (!shared_[1] && batches * m * n * k > 32768)
      for (int64_t t = 0; t < batches; ++t) {
        const float* pa = a + mat_[0][t] * m * k;
        const float* pdy = dy + t * m * n;
        float* pdb = db + mat_[1][t] * k * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) {
            const float v = pa[i * k + p];
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) pdb[p * n + j] += v * pdy[i * n + j];
          }
      }
    }
  }

 private:
  // c[m, n] += a[m, k] b[k, n], all row-major.
  static void gemm_nn(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const float v = a[i * k + p];
        const float* pb = b + p * n;
        float* pc = c + i * n;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) pc[j] += v * pb[j];
      }
  }

  Geometry g_;
  std::vector<int64_t> mat_[2];      // per output matrix, the index of A's and of B's
  bool shared_[2] = {false, false};  // a matrix of A (B) serves several products
  int64_t count_[2] = {0, 0};
};

}  // namespace

BKS_REGISTER_OP_DEF("BatchMatMul", BatchMatMulDef);
BKS_REGISTER_KERNEL("BatchMatMul", ::bks::DeviceKind::cpu, BatchMatMulKernel, "loops", ::bks::kReferencePriority,
                    nullptr);

}  // namespace bks
