// Compact storage of weight tensors (bundles written by `deploy --compress`).
//
// A pruned tensor's zeros cost one bit each: a mask of which elements are stored. The
// stored elements' bytes are split into planes (byte 0 of every element, then byte 1, ...),
// because a float's sign-and-exponent byte repeats far more than its low mantissa bytes.
// Each stream is then entropy-coded with deflate (zlib), or kept raw where that is smaller.
// Coding is lossless, except that -0 decodes as +0.
//
// A tensor on a per-channel integer grid (the weights of a layer that runs INT8 kernels)
// is stored as its int8 levels plus each channel's max |w|: w = q * max[c] / levels. The grid
// is the one those kernels round to (a channel's max |w| maps to `levels`), and the top level
// decodes to the maximum itself, so an INT8 kernel finds the same per-channel scales and
// levels in the decoded tensor as in the original: it computes the same outputs.
//
// Every length in the coded bytes is checked against the bytes before anything is
// allocated: a crafted tensor decodes to at most a few thousand times its coded size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace bks {

struct ChannelGrid {
  int64_t channels = 0;
  // Channels run along the last axis of a [rows, channels] view (InnerProduct weights
  // stored transposed), instead of being the first axis' blocks.
  bool channel_last = false;
  int levels = 0;  // the int8 kernels' top level: 127 or 63 (backend/dnnl_util.h)
};

struct CodedWeights {
  std::string bytes;
  std::string layout;  // "sparse f32", "dense f32", "sparse int8 grid", ...
  int64_t stored = 0;  // elements stored (the rest are zeros)
};

// `grid` (f32 tensors only): store the tensor rounded onto that grid. A tensor holding
// NaN or infinity is stored without it.
CodedWeights encode_weights(const Tensor& t, const ChannelGrid* grid = nullptr);
// The tensor of `shape` and `dtype` the bytes code; InputError "<what>: corrupt coded
// tensor: ..." when they are not one.
Tensor decode_weights(std::string_view bytes, const Shape& shape, DType dtype, const std::string& what);

}  // namespace bks
