#include "recurrent_oracle.h"

#include <cmath>

namespace bks::test {
namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// y (rows) = W (rows, cols) v + b (b may be null).
std::vector<double> affine(const Tensor& w, const float* b, const std::vector<double>& v) {
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  std::vector<double> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = b ? b[r] : 0.0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w.f32()[r * cols + c]) * v[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

std::vector<double> slice(const float* p, int64_t n) { return std::vector<double>(p, p + n); }
}  // namespace

std::vector<Tensor> recurrent_oracle(Cell cell, int64_t h, bool has_static, bool exposed, const std::vector<Tensor>& in,
                                     const std::vector<Tensor>& params) {
  const Tensor &x = in[0], &cont = in[1];
  const int64_t T = x.shape()[0], N = x.shape()[1], I = x.numel() / (T * N);
  const int states = cell == Cell::lstm ? 2 : 1;
  size_t p = 0;
  const Tensor& wx = params[p++];
  const Tensor& bx = params[p++];
  const Tensor* ws = has_static ? &params[p++] : nullptr;
  const Tensor& wh = params[p++];
  const Tensor* extra = p < params.size() ? &params[p] : nullptr;  // GRU's b_h; RNN's W_o, b_o
  Tensor y({T, N, h});
  std::vector<Tensor> finals;  // (each its own storage: copies of a Tensor share theirs)
  for (int k = 0; exposed && k < states; ++k) finals.emplace_back(Shape{1, N, h});
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> hp(static_cast<size_t>(h), 0.0), cp(static_cast<size_t>(h), 0.0);
    if (exposed) {
      const size_t first = in.size() - static_cast<size_t>(states);
      hp = slice(in[first].f32() + n * h, h);
      if (cell == Cell::lstm) cp = slice(in[first + 1].f32() + n * h, h);
    }
    std::vector<double> xs_proj;
    if (ws) {
      const int64_t S = in[2].numel() / N;
      xs_proj = affine(*ws, nullptr, slice(in[2].f32() + n * S, S));
    }
    for (int64_t t = 0; t < T; ++t) {
      const double k = cont.f32()[t * N + n];
      std::vector<double> hc(hp);
      for (double& v : hc) v *= k;
      std::vector<double> xg = affine(wx, bx.f32(), slice(x.f32() + (t * N + n) * I, I));
      for (size_t j = 0; j < xs_proj.size(); ++j) xg[j] += xs_proj[j];
      const std::vector<double> rg = affine(wh, cell == Cell::gru ? extra->f32() : nullptr, hc);
      std::vector<double> hn(static_cast<size_t>(h));
      for (int64_t d = 0; d < h; ++d) {
        const auto at = [&](const std::vector<double>& v, int gate) { return v[static_cast<size_t>(gate * h + d)]; };
        const auto D = static_cast<size_t>(d);
        if (cell == Cell::lstm) {
          const double i = sigmoid(at(xg, 0) + at(rg, 0)), f = sigmoid(at(xg, 1) + at(rg, 1));
          const double o = sigmoid(at(xg, 2) + at(rg, 2)), g = std::tanh(at(xg, 3) + at(rg, 3));
          cp[D] = k * f * cp[D] + i * g;
          hn[D] = o * std::tanh(cp[D]);
        } else if (cell == Cell::gru) {
          const double r = sigmoid(at(xg, 0) + at(rg, 0)), z = sigmoid(at(xg, 1) + at(rg, 1));
          const double nn = std::tanh(at(xg, 2) + r * at(rg, 2));
          hn[D] = (1 - z) * nn + z * hc[D];
        } else {
          hn[D] = std::tanh(at(xg, 0) + at(rg, 0));
        }
      }
      hp = hn;
      std::vector<double> out = hn;
      if (cell == Cell::rnn) {
        out = affine(params[p], params[p + 1].f32(), hn);
        for (double& v : out) v = std::tanh(v);
      }
      for (int64_t d = 0; d < h; ++d) y.f32()[(t * N + n) * h + d] = static_cast<float>(out[static_cast<size_t>(d)]);
    }
    for (int64_t d = 0; d < h && exposed; ++d) {
      finals[0].f32()[n * h + d] = static_cast<float>(hp[static_cast<size_t>(d)]);
      if (cell == Cell::lstm) finals[1].f32()[n * h + d] = static_cast<float>(cp[static_cast<size_t>(d)]);
    }
  }
  std::vector<Tensor> out{y};
  for (Tensor& f : finals) out.push_back(f);
  return out;
}

}  // namespace bks::test
