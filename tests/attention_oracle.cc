#include "attention_oracle.h"

#include <cmath>

namespace bks::test {

Tensor attention_oracle(const AttentionSpec& s, const Tensor& x, const std::vector<Tensor>& params) {
  const int64_t t = x.dim(0), n = x.dim(1), d = x.dim(2);
  const int64_t hd = s.head_dim > 0 ? s.head_dim : d / s.heads, inner = s.heads * hd, out = s.out > 0 ? s.out : d;
  const float* w = params[0].f32();
  const float* b = s.bias ? params[1].f32() : nullptr;
  const float* wo = params[s.bias ? 2 : 1].f32();
  const float* bo = s.bias ? params[3].f32() : nullptr;
  // qkv[(t n), j] = x W_qkv^T + b_qkv
  std::vector<double> qkv(static_cast<size_t>(t * n * 3 * inner));
  for (int64_t r = 0; r < t * n; ++r)
    for (int64_t j = 0; j < 3 * inner; ++j) {
      double acc = b ? b[j] : 0.0;
      for (int64_t e = 0; e < d; ++e) acc += static_cast<double>(x.f32()[r * d + e]) * w[j * d + e];
      qkv[static_cast<size_t>(r * 3 * inner + j)] = acc;
    }
  auto at = [&](int64_t time, int64_t stream, int part, int64_t head, int64_t e) {
    return qkv[static_cast<size_t>((time * n + stream) * 3 * inner + part * inner + head * hd + e)];
  };
  // The kernel: exp(q . k / sqrt(hd)), or the random-feature estimate of it.
  const Tensor* omega = s.performer ? &params.back() : nullptr;
  auto features = [&](int64_t time, int64_t stream, int part, int64_t head) {
    const int64_t m = omega->dim(0);
    const double scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(hd)));
    double sq = 0;
    for (int64_t e = 0; e < hd; ++e) sq += at(time, stream, part, head, e) * at(time, stream, part, head, e);
    std::vector<double> f(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      double p = 0;
      for (int64_t e = 0; e < hd; ++e) p += omega->f32()[i * hd + e] * at(time, stream, part, head, e) * scale;
      f[static_cast<size_t>(i)] = std::exp(p - 0.5 * sq * scale * scale);
    }
    return f;
  };
  auto similarity = [&](int64_t tq, int64_t tk, int64_t stream, int64_t head) {
    if (!omega) {
      double p = 0;
      for (int64_t e = 0; e < hd; ++e) p += at(tq, stream, 0, head, e) * at(tk, stream, 1, head, e);
      return std::exp(p / std::sqrt(static_cast<double>(hd)));
    }
    const std::vector<double> fq = features(tq, stream, 0, head), fk = features(tk, stream, 1, head);
    double p = 0;
    for (size_t i = 0; i < fq.size(); ++i) p += fq[i] * fk[i];
    return p;
  };
  std::vector<double> ctx(static_cast<size_t>(t * n * inner), 0.0);
  for (int64_t stream = 0; stream < n; ++stream)
    for (int64_t head = 0; head < s.heads; ++head)
      for (int64_t tq = 0; tq < t; ++tq) {
        const int64_t last = s.causal ? tq : t - 1;
        double den = 0;
        std::vector<double> num(static_cast<size_t>(hd), 0.0);
        for (int64_t tk = 0; tk <= last; ++tk) {
          const double a = similarity(tq, tk, stream, head);
          den += a;
          for (int64_t e = 0; e < hd; ++e) num[static_cast<size_t>(e)] += a * at(tk, stream, 2, head, e);
        }
        for (int64_t e = 0; e < hd; ++e)
          ctx[static_cast<size_t>((tq * n + stream) * inner + head * hd + e)] = num[static_cast<size_t>(e)] / den;
      }
  Tensor y({t, n, out});
  for (int64_t r = 0; r < t * n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bo ? bo[o] : 0.0;
      for (int64_t e = 0; e < inner; ++e) acc += ctx[static_cast<size_t>(r * inner + e)] * wo[o * inner + e];
      y.f32()[r * out + o] = static_cast<float>(acc);
    }
  return y;
}

}  // namespace bks::test
