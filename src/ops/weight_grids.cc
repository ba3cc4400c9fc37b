#include "ops/weight_grids.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace bks {

namespace {

// Calls f(x, step, n) for each output channel: its n weights are x[i * step].
template <class F>
void each_channel(Tensor& w, bool output_last, F f) {
  const int64_t all = w.numel();
  if (all == 0) return;
  const int64_t channels = output_last ? w.shape().back() : w.dim(0);
  const int64_t per = all / channels;
  // Element i of channel c: c * per + i, or i * channels + c when the outputs are last.
  const int64_t channel_stride = output_last ? 1 : per, item_stride = output_last ? channels : 1;
  float* p = w.f32();
#pragma omp parallel for
  for (int64_t c = 0; c < channels; ++c) f(p + c * channel_stride, item_stride, per);
}

}  // namespace

WeightGrid weight_grid(const std::string& name) {
  if (name == "int8") return WeightGrid::int8;
  if (name == "binary") return WeightGrid::binary;
  if (name == "pow2") return WeightGrid::pow2;
  if (name == "xnor") return WeightGrid::binary;  // and binary activations (passes/insert_binarize.h)
  input_error("--qat {}: the grids are int8 (the INT8 deployment's), binary, pow2 and xnor (binary weights and inputs)",
              name);
}

void fake_quantize_weights(Tensor& w, bool output_last, float levels) {
  each_channel(w, output_last, [levels](float* x, int64_t step, int64_t n) {
    float m = 0.f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i * step]));
    if (!(m > 0.f)) return;
    const float to_grid = levels / m, from_grid = m / levels;
    for (int64_t i = 0; i < n; ++i)
      x[i * step] = std::clamp(std::nearbyint(x[i * step] * to_grid), -levels, levels) * from_grid;
  });
}

float binary_scale(const float* x, int64_t step, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(x[i * step]);
  return static_cast<float>(sum / static_cast<double>(n));
}

void binarize_weights(Tensor& w, bool output_last) {
  each_channel(w, output_last, [](float* x, int64_t step, int64_t n) {
    const float a = binary_scale(x, step, n);
    for (int64_t i = 0; i < n; ++i) x[i * step] = x[i * step] < 0.f ? -a : a;
  });
}

void power_of_two_weights(Tensor& w, bool output_last) {
  each_channel(w, output_last, [](float* x, int64_t step, int64_t n) {
    float m = 0.f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i * step]));
    if (!(m > 0.f)) return;
    const float top = std::nearbyint(std::log2(m)), bottom = top - 7.f;
    for (int64_t i = 0; i < n; ++i) {
      float& v = x[i * step];
      const float a = std::fabs(v);
      // Below half way (in log scale) to the smallest power: 0.
      if (!(a > 0.f) || std::log2(a) < bottom - 0.5f) {
        v = 0.f;
        continue;
      }
      const float k = std::clamp(std::nearbyint(std::log2(a)), bottom, top);
      v = std::copysign(std::exp2(k), v);
    }
  });
}

void round_to_grid(Tensor& w, bool output_last, WeightGrid grid, float levels) {
  switch (grid) {
    case WeightGrid::int8: fake_quantize_weights(w, output_last, levels); break;
    case WeightGrid::binary: binarize_weights(w, output_last); break;
    case WeightGrid::pow2: power_of_two_weights(w, output_last); break;
  }
}

}  // namespace bks
