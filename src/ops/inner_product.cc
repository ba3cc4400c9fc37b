// InnerProduct: y = x W^T + b over the axes from `axis` on, GEMMs by oneDNN's sgemm.
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/op.h"

namespace bks {
namespace {

void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc) {
  dnnl::sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
}

class InnerProductOp final : public Op {
 public:
  explicit InnerProductOp(const OpInit& init) : Op(init), p_(init.node.param.inner_product_param()) {
    if (p_.num_output() == 0) fail("inner_product_param.num_output must be positive");
  }
  int min_inputs() const override { return 1; }

  void infer(const std::vector<Shape>& in, std::vector<Shape>& out) override {
    int axis = canonical_axis(p_.axis(), static_cast<int>(in[0].size()), "inner_product_param.axis");
    int64_t k = shape_count(in[0], axis, static_cast<int>(in[0].size()));
    if (k_ && k != k_) fail("input has {} features per item but the weights expect {}", k, k_);
    k_ = k;
    m_ = shape_count(in[0], 0, axis);
    n_ = p_.num_output();
    out[0] = Shape(in[0].begin(), in[0].begin() + axis);
    out[0].push_back(n_);
  }

  std::vector<ParamDecl> declare_params(const std::vector<Shape>&) override {
    Shape w = p_.transpose() ? Shape{k_, n_} : Shape{n_, k_};
    std::vector<ParamDecl> d{{w, p_.weight_filler(), true}};
    if (p_.bias_term()) d.push_back({{n_}, p_.bias_filler(), true});
    return d;
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    float* y = c.out[0]->f32();
    if (p_.transpose())
      gemm('N', 'N', m_, n_, k_, x, k_, w, n_, y, n_);
    else
      gemm('N', 'T', m_, n_, k_, x, k_, w, k_, y, n_);
    if (!p_.bias_term()) return;
    const float* b = c.params[1]->f32();
    for (int64_t i = 0; i < m_; ++i) {
      float* row = y + i * n_;
#pragma omp simd
      for (int64_t j = 0; j < n_; ++j) row[j] += b[j];
    }
  }

  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) {
      if (p_.transpose())
        gemm('T', 'N', k_, n_, m_, x, k_, dy, n_, c.param_grad[0]->f32(), n_);
      else
        gemm('T', 'N', n_, k_, m_, dy, n_, x, k_, c.param_grad[0]->f32(), k_);
    }
    if (p_.bias_term() && c.param_grad[1]) {
      float* db = c.param_grad[1]->f32();
      std::fill_n(db, n_, 0.f);
      for (int64_t i = 0; i < m_; ++i) {
        const float* row = dy + i * n_;
#pragma omp simd
        for (int64_t j = 0; j < n_; ++j) db[j] += row[j];
      }
    }
    if (c.in_grad[0]) {
      if (p_.transpose())
        gemm('N', 'T', m_, k_, n_, dy, n_, w, n_, c.in_grad[0]->f32(), k_);
      else
        gemm('N', 'N', m_, k_, n_, dy, n_, w, k_, c.in_grad[0]->f32(), k_);
    }
  }

  std::string kernel_name() const override { return "oneDNN sgemm"; }

 private:
  proto::InnerProductParameter p_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
};

}  // namespace

BKS_REGISTER_OP("InnerProduct", InnerProductOp);

}  // namespace bks
