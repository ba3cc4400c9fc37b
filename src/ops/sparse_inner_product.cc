#include "ops/sparse_inner_product.h"

namespace bks {

SparseInnerProduct::SparseInnerProduct(const float* w, int64_t n, int64_t k, bool weights_kn) : n_(n), k_(k) {
  row_start_.reserve(static_cast<size_t>(n + 1));
  row_start_.push_back(0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) {
      const float v = weights_kn ? w[i * n + j] : w[j * k + i];
      if (v != 0.f) {
        column_.push_back(static_cast<int32_t>(i));
        value_.push_back(v);
      }
    }
    row_start_.push_back(static_cast<int64_t>(value_.size()));
  }
}

void SparseInnerProduct::run(const float* x, int64_t m, const float* bias, float* y, bool relu, float slope) const {
  // Each output row j reads its few weights once for every item; the items' inputs stay
  // in cache (LeNet's ip1: 800 floats each).
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n_; ++j) {
    const int64_t begin = row_start_[static_cast<size_t>(j)], end = row_start_[static_cast<size_t>(j) + 1];
    const int32_t* col = column_.data();
    const float* val = value_.data();
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k_;
      float s = bias ? bias[j] : 0.f;
      for (int64_t p = begin; p < end; ++p) s += val[p] * xi[col[p]];
      y[i * n_ + j] = relu && s < 0.f ? s * slope : s;
    }
  }
}

double nonzero_fraction(const float* w, int64_t count) {
  int64_t nonzero = 0;
  for (int64_t i = 0; i < count; ++i) nonzero += w[i] != 0.f;
  return count ? static_cast<double>(nonzero) / static_cast<double>(count) : 0.0;
}

}  // namespace bks
