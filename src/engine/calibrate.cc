#include "engine/calibrate.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "engine/session.h"
#include "formats/safetensors.h"
#include "passes/insert_fake_quant.h"

namespace bks {

namespace {
constexpr int kBins = 2048;
constexpr int kLevels = 128;  // int8 magnitudes
constexpr double kMseIgnoredTail = 1e-5;
}  // namespace

void AbsHistogram::add(const float* x, int64_t n) {
  if (bins.empty()) bins.assign(kBins, 0.0);
  if (range <= 0) return;
  const double scale = kBins / range;
  for (int64_t i = 0; i < n; ++i) {
    // Exact zeros (half of every ReLU output) are exact in int8 too; counted, they would
    // dominate the first bin and drag the entropy threshold far down.
    if (x[i] == 0.f || !std::isfinite(x[i])) continue;
    int b = static_cast<int>(std::fabs(x[i]) * scale);
    ++bins[std::min(b, kBins - 1)];
  }
}

double threshold_minmax(const AbsHistogram& h) { return h.range; }

double threshold_percentile(const AbsHistogram& h, double percentile) {
  double total = 0;
  for (double c : h.bins) total += c;
  if (total == 0) return h.range;
  double want = total * percentile / 100.0, seen = 0;
  for (size_t i = 0; i < h.bins.size(); ++i) {
    seen += h.bins[i];
    if (seen >= want) return h.range * static_cast<double>(i + 1) / h.bins.size();
  }
  return h.range;
}

double threshold_entropy(const AbsHistogram& h) {
  const int n = static_cast<int>(h.bins.size());
  double total = 0;
  for (double c : h.bins) total += c;
  if (total == 0 || n < kLevels) return h.range;
  double best_kl = std::numeric_limits<double>::infinity();
  int best = n;
  for (int i = kLevels; i <= n; ++i) {
    // Reference: the first i bins, with everything beyond clipped into the last one.
    std::vector<double> p(h.bins.begin(), h.bins.begin() + i);
    for (int j = i; j < n; ++j) p[i - 1] += h.bins[j];
    // Candidate: the first i bins merged into kLevels levels, each level spread evenly
    // over the bins of its group that were non-empty.
    std::vector<double> q(i, 0.0);
    for (int l = 0; l < kLevels; ++l) {
      int lo = l * i / kLevels, hi = (l + 1) * i / kLevels;
      double sum = 0;
      int nonzero = 0;
      for (int j = lo; j < hi; ++j) {
        sum += h.bins[j];
        nonzero += h.bins[j] != 0;
      }
      for (int j = lo; j < hi; ++j)
        if (h.bins[j] != 0) q[j] = sum / nonzero;
    }
    double ps = 0, qs = 0;
    for (int j = 0; j < i; ++j) {
      ps += p[j];
      qs += q[j];
    }
    if (qs == 0) continue;
    double kl = 0;
    for (int j = 0; j < i; ++j) {
      if (p[j] == 0) continue;
      double pj = p[j] / ps, qj = q[j] / qs;
      kl += qj > 0 ? pj * std::log(pj / qj) : pj * 30.0;  // an empty level where p has mass: heavy penalty
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return h.range * (best + 0.5) / n;
}

double threshold_mse(const AbsHistogram& h) {
  double total = 0;
  for (double c : h.bins) total += c;
  if (total == 0) return h.range;
  const double w = h.range / static_cast<double>(h.bins.size());
  // The rarest 0.001% of magnitudes may not set the scale: squared error would let one value
  // in 100,000 at 25 sigma stretch the steps of all the rest. They count as lying at the
  // bin where that tail starts (a threshold below it still pays for clipping them).
  int n = static_cast<int>(h.bins.size());
  double tail = 0;
  while (n > 1 && tail + h.bins[n - 1] <= total * kMseIgnoredTail) tail += h.bins[--n];
  std::vector<double> bins(h.bins.begin(), h.bins.begin() + n);
  bins[n - 1] += tail;
  // Suffix sums of c, c*x and c*x^2 over bin centres: the clipping error of every bin above
  // a threshold T is sum c (x - T)^2 = sum cx^2 - 2T sum cx + T^2 sum c, in O(1) per T.
  std::vector<double> sc(n + 1, 0.0), sx(n + 1, 0.0), sxx(n + 1, 0.0);
  for (int j = n - 1; j >= 0; --j) {
    const double x = (j + 0.5) * w, c = bins[j];
    sc[j] = sc[j + 1] + c;
    sx[j] = sx[j + 1] + c * x;
    sxx[j] = sxx[j + 1] + c * x * x;
  }
  // Rounding error below T: each bin's mass spread evenly over it, sampled at a few points
  // (a bin is narrower than a step for most T, and a spike's error depends on where it sits).
  constexpr int kSamples = 4;
  double best_err = std::numeric_limits<double>::infinity();
  int best = n;
  for (int i = 1; i <= n; ++i) {
    const double t = i * w, step = t / (kLevels - 1);
    double err = sxx[i] - 2 * t * sx[i] + t * t * sc[i];
    for (int j = 0; j < i && err < best_err; ++j) {
      if (bins[j] == 0) continue;
      double e = 0;
      for (int k = 0; k < kSamples; ++k) {
        const double x = (j + (k + 0.5) / kSamples) * w;
        const double r = x - std::nearbyint(x / step) * step;
        e += r * r;
      }
      err += bins[j] * e / kSamples;
    }
    if (err < best_err) {
      best_err = err;
      best = i;
    }
  }
  return best * w;
}

std::string CalibrationTable::to_json() const {
  nlohmann::ordered_json j;
  j["method"] = method;
  j["batches"] = batches;
  j["threshold"] = threshold;
  return j.dump();
}

std::optional<CalibrationTable> learned_ranges(const std::string& weights) {
  if (!weights.ends_with(".safetensors")) return std::nullopt;
  const TensorFile f = load_safetensors(weights);
  CalibrationTable t;
  t.method = "qat";
  for (const auto& [key, tensor] : f.tensors) {
    const std::string blob = fake_quant_blob(key);
    if (blob.empty()) continue;
    const float th = tensor.dtype() == DType::f32 && tensor.numel() == 1 ? tensor.f32()[0] : -1.f;
    if (th == 0.f) {  // never trained (a snapshot before the first step): that layer stays FP32
      log::warn("{}: '{}' holds no learnt range yet; '{}' is not quantized", weights, key, blob);
      continue;
    }
    if (!(th > 0.f) || !std::isfinite(th))
      input_error("{}: '{}' is not a learnt int8 range (one positive float), so this file cannot quantize '{}'",
                  weights, key, blob);
    t.threshold[blob] = th;
  }
  if (t.threshold.empty()) return std::nullopt;
  return t;
}

CalibrationTable CalibrationTable::from_json(const std::string& text, const std::string& source) {
  CalibrationTable t;
  try {
    auto j = nlohmann::json::parse(text);
    t.method = j.at("method").get<std::string>();
    t.batches = j.at("batches").get<int>();
    for (auto& [name, v] : j.at("threshold").items()) {
      double th = v.get<double>();
      if (!(th > 0) || !std::isfinite(th)) input_error("{}: calibration threshold of '{}' is {}", source, name, th);
      t.threshold[name] = th;
    }
  } catch (const nlohmann::json::exception& e) {
    input_error("{}: not a calibration table ({})", source, e.what());
  }
  return t;
}

CalibrationTable calibrate(const Bundle& b, const std::string& source, const std::string& dataset, int batches,
                           const std::string& method, int threads) {
  if (method != "minmax" && method != "percentile" && method != "entropy" && method != "mse")
    input_error("--calib-method must be mse, entropy, percentile or minmax, got '{}'", method);
  if (batches <= 0) input_error("--calib-batches must be positive, got {}", batches);
  // "random": the bundle's own Input layers, fed uniform [0, 1) values (for timing, or nets
  // without a dataset; ranges from real data are what accuracy needs).
  const bool random = dataset == "random";
  NetOptions opt;
  opt.reuse_buffers = false;  // every value readable after the pass
  auto calib = build_bundle_net(b, random ? b.graph : scoring_net(b, source, dataset), source, threads, opt);
  Net& net = *calib->net;
  // The tensors an int8 kernel would quantize: inputs of convolutions and inner products,
  // the residuals fused into them (int8 when their writers can write int8), and inputs of
  // average poolings (which read int8 when their writers can write it).
  std::set<int> watched;
  const Graph& g = net.graph();
  for (const Node& n : g.nodes) {
    const OpTraits tr = op_traits(n);
    if (tr.weighted_linear) {
      watched.insert(n.inputs[0]);
      if (n.deploy.fusion.residual_sum && n.inputs.size() == 2) watched.insert(n.inputs[1]);
    } else if (tr.averages_int8 && n.inputs.size() == 1) {
      watched.insert(n.inputs[0]);
    }
  }
  std::map<int, AbsHistogram> hist;
  auto plain = [&](int v) { return net.is_blocked(v) ? net.plain_copy(v) : net.value(v); };
  // Pass 1: ranges. Pass 2: histograms over them. Same batches both times.
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < batches; ++i) {
      if (random) {
        Rng rng(static_cast<uint64_t>(1000 + i));
        for (int v : net.inputs()) {
          Tensor& t = net.value(v);
          for (int64_t k = 0; k < t.numel(); ++k) t.f32()[k] = rng.uniform(0.f, 1.f);
        }
      }
      net.forward(i);
      for (int v : watched) {
        Tensor t = plain(v);
        AbsHistogram& h = hist[v];
        if (pass == 0) {
          for (int64_t k = 0; k < t.numel(); ++k) {
            float x = t.f32()[k];
            if (!std::isfinite(x))
              runtime_error(
                  "calibration: '{}' holds {} on batch {}; the FP32 graph does not compute finite values here",
                  g.values[v].name, x, i);
            h.range = std::max(h.range, static_cast<double>(std::fabs(x)));
          }
        } else {
          h.add(t.f32(), t.numel());
        }
      }
    }
  CalibrationTable table;
  table.method = method;
  table.batches = batches;
  for (auto& [v, h] : hist) {
    double th = method == "minmax"       ? threshold_minmax(h)
                : method == "percentile" ? threshold_percentile(h, 99.99)
                : method == "mse"        ? threshold_mse(h)
                                         : threshold_entropy(h);
    table.threshold[g.values[v].name] = th;
  }
  return table;
}

}  // namespace bks
