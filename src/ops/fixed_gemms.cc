#include "ops/fixed_gemms.h"

#include <algorithm>

namespace bks {

int FixedGemms::add(Spec s) {
  specs_.push_back(s);
  return static_cast<int>(specs_.size()) - 1;
}

void FixedGemms::prepare(dnnl::engine* eng, bool fast) {
  mm_.clear();
  if (!fast) return;
  mm_.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    const Spec& s = specs_[i];
    mm_[i].prepare(*eng, s.ta, s.tb, s.m, s.n, s.k, s.bias, false, 0.f, s.constant_b);
  }
}

void FixedGemms::run(dnnl::stream* st, int id, const float* a, const float* b, float* c, const float* bias) {
  if (!mm_.empty()) {
    mm_[static_cast<size_t>(id)].run(*st, a, b, c, bias);
    st->wait();
    return;
  }
  const Spec& s = specs_[static_cast<size_t>(id)];
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < s.k; ++p)
        acc += static_cast<double>(s.ta == 'N' ? a[i * s.k + p] : a[p * s.m + i]) *
               (s.tb == 'N' ? b[p * s.n + j] : b[j * s.k + p]);
      c[i * s.n + j] = static_cast<float>(acc);
    }
}

void sum_rows(const float* m, int64_t rows, int64_t cols, float* out) {
  std::fill(out, out + cols, 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out[j] += m[r * cols + j];
}

}  // namespace bks
