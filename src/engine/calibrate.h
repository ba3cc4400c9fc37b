// INT8 calibration: the range of every tensor a quantized kernel would read, measured by
// running the FP32 graph on sample batches. Thresholds (the |x| mapped to the largest
// int8 level) by min-max, percentile, or entropy (TensorRT's KL-divergence calibrator).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/bundle.h"

namespace bks {

// A histogram of nonzero |x| over [0, range) in equal bins, filled in two passes: ranges
// first.
struct AbsHistogram {
  double range = 0;
  std::vector<double> bins;
  void add(const float* x, int64_t n);
};

double threshold_minmax(const AbsHistogram& h);
// The |x| below which `percentile` percent of the samples lie.
double threshold_percentile(const AbsHistogram& h, double percentile);
// The threshold whose 128-level quantization of the clipped distribution has the least
// KL divergence from the original (TensorRT's entropy calibrator).
double threshold_entropy(const AbsHistogram& h);
// The threshold with the least expected squared error, clipping above it plus rounding to
// its 127 steps below it, the rarest 0.001% of magnitudes counted at the start of their tail
// (squared error alone lets a lone far outlier set the scale). Unlike the KL search it
// weighs how far clipped values lie, so a few tall spikes (constant background pixels seen
// through BN shifts) cannot pull it below the bulk of the signal.
double threshold_mse(const AbsHistogram& h);

struct CalibrationTable {
  std::string method;
  int batches = 0;
  std::map<std::string, double> threshold;  // by value (blob) name
  std::string to_json() const;
  // The table as to_json() wrote it; InputError naming `source` when it is not one.
  static CalibrationTable from_json(const std::string& text, const std::string& source);
};

// The activation ranges quantization-aware training learnt (train --qat int8), read from its
// weights file: each "<blob>/fake_quant.0" entry is the threshold of <blob> (method "qat").
// nullopt when the file (a .safetensors) holds none, or `weights` is empty; InputError
// naming the entry when a range is negative, not finite or not one float (a range of 0,
// never trained, leaves its blob out).
std::optional<CalibrationTable> learned_ranges(const std::string& weights);

// Runs the bundle's FP32 graph on `batches` batches of `dataset` (empty: the data its net
// was tested on; "random": uniform [0, 1) inputs) and measures every input of a
// Convolution / InnerProduct (fused residuals included).
// method: "mse", "entropy", "percentile" (99.99) or "minmax".
CalibrationTable calibrate(const Bundle& b, const std::string& source, const std::string& dataset, int batches,
                           const std::string& method, int threads);

}  // namespace bks
