// deploy --compress: a bundle's weights stored coded (formats/weight_coding.h): pruned zeros
// as a bit mask, the rest entropy-coded, and the weights of layers that run INT8 kernels as
// the int8 levels those kernels compute from them. The deployed network computes what it
// computes uncompressed, unless --weight-bits asks for fewer levels.
#pragma once

#include <string>
#include <vector>

#include "engine/bundle.h"

namespace bks {

struct CodedTensorReport {
  std::string name, layout;  // layout: "sparse f32", "sparse int8 grid", ...
  int64_t elements = 0, stored = 0;
  size_t dense_bytes = 0, coded_bytes = 0;
};

// Codes every weight of `b` (b.coded), and replaces each by its decoded value so that the
// bundle in memory is the one on disk. Run it after every pass that changes weights or
// which layers run INT8. One row per tensor, largest coded first.
//
// weight_bits (2-8; 0: off) makes it lossy, as Deep Compression's weight sharing is: every
// convolution's and inner product's weights are stored on a per-channel grid of at most
// 2^(bits-1) - 1 levels each side of zero (5 bits: 15), the INT8 layers' included, which
// then compute with those values. InputError for bits outside [2, 8].
std::vector<CodedTensorReport> compress_weights(Bundle& b, int weight_bits = 0);
// "1.72 MB of weights stored in 0.057 MB (30.1x smaller)".
std::string coding_summary(const std::vector<CodedTensorReport>& rows);

}  // namespace bks
