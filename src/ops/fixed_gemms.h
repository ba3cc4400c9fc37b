// The GEMMs of a kernel that multiplies whole blobs (recurrent layers, attention's
// projections), declared once their shapes are known and run every step.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <vector>

#include "ops/matmul.h"

namespace bks {

// Row-major GEMMs of fixed shapes, C = op(A) op(B) (+ bias per column), as matmul.h takes
// them: plain loops in double for the reference kernel, oneDNN matmuls for the fast one.
class FixedGemms {
 public:
  struct Spec {
    char ta = 'N', tb = 'N';
    int64_t m = 0, n = 0, k = 0;
    bool bias = false;
    // B is a weight that never changes (inference): oneDNN packs it once.
    bool constant_b = false;
  };
  void clear() { specs_.clear(); }
  int add(Spec s);  // its id for run()
  // fast: oneDNN matmuls on `eng`; else loops.
  void prepare(dnnl::engine* eng, bool fast);
  void run(dnnl::stream* s, int id, const float* a, const float* b, float* c, const float* bias = nullptr);

 private:
  std::vector<Spec> specs_;
  std::vector<MatMul> mm_;
};

// out (cols) = the sum of the rows of m (rows, cols): a GEMM's bias gradient.
void sum_rows(const float* m, int64_t rows, int64_t cols, float* out);

}  // namespace bks
