#include "runtime/filler.h"

#include <cmath>

namespace bks {
namespace {

float fan_scale_n(const Tensor& t, const FillerSpec& f) {
  int64_t count = t.numel();
  float fan_in = static_cast<float>(count / std::max<int64_t>(t.dim(0), 1));
  float fan_out = t.ndim() > 1 ? static_cast<float>(count / std::max<int64_t>(t.dim(1), 1)) : fan_in;
  switch (f.variance_norm) {
    case FillerSpec::fan_out: return fan_out;
    case FillerSpec::average: return (fan_in + fan_out) / 2.f;
    default: return fan_in;
  }
}

}  // namespace

void fill_tensor(Tensor& t, const FillerSpec& f, Rng& rng, const std::string& where) {
  float* p = t.f32();
  int64_t n = t.numel();
  const std::string& type = f.type;
  if (type == "constant") {
    std::fill_n(p, n, f.value);
  } else if (type == "uniform") {
    if (!(f.max >= f.min)) input_error("{}: uniform filler needs max >= min", where);
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(f.min, f.max);
  } else if (type == "gaussian") {
    for (int64_t i = 0; i < n; ++i) p[i] = rng.gaussian(f.mean, f.std);
    if (f.sparse >= 0) {
      // Each output unit keeps about `sparse` nonzero inputs, as in Caffe.
      if (t.ndim() < 1) input_error("{}: sparse gaussian filler needs a shaped blob", where);
      int64_t num_outputs = t.dim(0);
      float keep = static_cast<float>(f.sparse) / static_cast<float>(num_outputs);
      for (int64_t i = 0; i < n; ++i)
        if (rng.uniform(0.f, 1.f) >= keep) p[i] = 0.f;
    }
  } else if (type == "xavier") {
    float scale = std::sqrt(3.f / fan_scale_n(t, f));
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(-scale, scale);
  } else if (type == "msra") {
    float stddev = std::sqrt(2.f / fan_scale_n(t, f));
    for (int64_t i = 0; i < n; ++i) p[i] = rng.gaussian(0.f, stddev);
  } else if (type == "bilinear") {
    if (t.ndim() != 4 || t.dim(2) != t.dim(3)) input_error("{}: bilinear filler needs a square 4-d kernel", where);
    int64_t k = t.dim(3);
    // Weights of bilinear upsampling by a factor f = ceil(k / 2), centred at c = (k - 1) / 2f
    // (BVLC Caffe's formula since 2017; the older (2f - 1 - f % 2) / 2f is off for odd f).
    float f2 = std::ceil(k / 2.f);
    float c = static_cast<float>(k - 1) / (2 * f2);
    for (int64_t i = 0; i < n; ++i) {
      float x = static_cast<float>(i % k), y = static_cast<float>((i / k) % k);
      p[i] = (1 - std::fabs(x / f2 - c)) * (1 - std::fabs(y / f2 - c));
    }
  } else if (type == "positive_unitball") {
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(0.f, 1.f);
    int64_t rows = t.dim(0), dim = n / std::max<int64_t>(rows, 1);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t j = 0; j < dim; ++j) s += p[r * dim + j];
      for (int64_t j = 0; j < dim; ++j) p[r * dim + j] = static_cast<float>(p[r * dim + j] / s);
    }
  } else {
    input_error("{}: unknown filler type '{}'", where, type);
  }
}

}  // namespace bks
