// An inner product over pruned weights, stored as compressed rows (CSR): y = x W^T + b
// computing only the nonzero weights' products. InnerProduct's inference kernel times it
// against oneDNN's dense GEMM on its first forward and keeps the faster one; deploy saves
// the choice in the bundle (deploy.kernel "sparse").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bks {

class SparseInnerProduct {
 public:
  // w: n x k, or k x n when weights_kn (InnerProduct's transpose).
  SparseInnerProduct(const float* w, int64_t n, int64_t k, bool weights_kn);
  // y (m x n) = x (m x k) W^T + bias (may be null), then a ReLU with `slope` when relu.
  void run(const float* x, int64_t m, const float* bias, float* y, bool relu, float slope) const;
  double density() const {
    return n_ > 0 && k_ > 0 ? static_cast<double>(value_.size()) / static_cast<double>(n_ * k_) : 0.0;
  }

 private:
  int64_t n_, k_;
  std::vector<int64_t> row_start_;  // n + 1 offsets into column_ and value_
  std::vector<int32_t> column_;
  std::vector<float> value_;
};

// The fraction of w's `count` elements that are not zero.
double nonzero_fraction(const float* w, int64_t count);

}  // namespace bks
