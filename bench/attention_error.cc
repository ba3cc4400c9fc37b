// How far PERFORMER attention's random-feature estimate lies from exact softmax attention,
// as a function of the number of features: one MultiHeadAttention layer (T timesteps of one
// stream, width 256, 4 heads of 64) computed both ways with the same projections, over
// several feature draws. Inputs are N(0, 1) per element, as after a LayerNorm; W_qkv is
// N(0, scale^2 / 256), `scale` 1 being xavier's variance.
//   attention_error_bench [T] [scale ...]   (default: 512, scales 0.5 1)
// Prints CSV: scale,causal,features,relative_error (||y_performer - y_exact|| / ||y_exact||,
// the median over the draws). bench/attention.py plots it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "op_harness.h"

using namespace bks;
using bks::test::OpHarness;

namespace {

constexpr int64_t kWidth = 256;
constexpr int kDraws = 5;

double relative_error(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double e = static_cast<double>(a.f32()[i]) - b.f32()[i];
    d += e * e;
    n += static_cast<double>(b.f32()[i]) * b.f32()[i];
  }
  return std::sqrt(d / n);
}

std::string layer(bool causal, const std::string& kernel) {
  return fmt::format("type: 'MultiHeadAttention' attention_param {{ num_heads: 4 causal: {} {} }}", causal, kernel);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t t = argc > 1 ? std::atol(argv[1]) : 512;
  std::vector<double> scales;
  for (int i = 2; i < argc; ++i) scales.push_back(std::atof(argv[i]));
  if (scales.empty()) scales = {0.5, 1.0};
  fmt::print("scale,causal,features,relative_error\n");
  for (double scale : scales)
    for (bool causal : {false, true}) {
      OpHarness exact(layer(causal, ""), {{t, 1, kWidth}}, proto::TEST);
      Rng rng(11);
      for (int64_t i = 0; i < exact.in[0].numel(); ++i) exact.in[0].f32()[i] = rng.gaussian(0.f, 1.f);
      for (Tensor& p : exact.params)
        for (int64_t i = 0; i < p.numel(); ++i)
          p.f32()[i] = rng.gaussian(0.f, static_cast<float>(scale / std::sqrt(static_cast<double>(kWidth))));
      exact.forward();
      for (int features : {16, 32, 64, 128, 256, 512, 1024, 2048}) {
        // TRAIN with redraw_interval 1: step k draws the k-th set of features.
        OpHarness perf(layer(causal, fmt::format("kernel: PERFORMER num_features: {} redraw_interval: 1", features)),
                       {{t, 1, kWidth}});
        for (size_t p = 0; p < exact.params.size(); ++p) perf.params[p].copy_from(exact.params[p]);
        perf.in[0].copy_from(exact.in[0]);
        std::vector<double> errors;
        for (int draw = 0; draw < kDraws; ++draw) {
          perf.set_step(draw);
          perf.forward();
          errors.push_back(relative_error(perf.out[0], exact.out[0]));
        }
        std::sort(errors.begin(), errors.end());
        fmt::print("{},{},{},{:.5f}\n", scale, causal ? 1 : 0, features, errors[kDraws / 2]);
        std::fflush(stdout);
      }
    }
  return 0;
}
