// The grids quantization-aware training rounds weights to (train --qat, train/weight_fake_quant.h)
// and deploy rounds a binary or power-of-two snapshot's weights to, one scale per output
// channel (axis 0, or the last axis when `output_last`: InnerProduct's transpose):
// - int8: the one INT8 deployment stores (symmetric: max |w| maps to `levels`);
// - binary: sign(w) times the channel's mean |w| (BinaryConnect with XNOR-Net's scale);
// - pow2: sign(w) times a power of two, 8 exponents below the channel's largest (4 bits a
//   weight); smaller magnitudes become 0.
#pragma once

#include <string>

#include "core/tensor.h"

namespace bks {

enum class WeightGrid { int8, binary, pow2 };
// "int8", "binary" or "pow2" ("xnor": binary, its activations binarized too); InputError
// naming --qat otherwise.
WeightGrid weight_grid(const std::string& name);

// The int8 grid: `levels` steps per side of zero.
void fake_quantize_weights(Tensor& w, bool output_last, float levels);
// The binary grid: each output channel's weights become +-(its mean |w|) by their sign.
void binarize_weights(Tensor& w, bool output_last);
// That magnitude for one channel's n weights x[0], x[step], ...: their mean |x| (the binary
// layers' per-channel alpha, ops/binary_convolution.cc, ops/binary_inner_product.cc).
float binary_scale(const float* x, int64_t step, int64_t n);
// The power-of-two grid: +-2^k for k in [kmax - 7, kmax], kmax rounding log2 of the channel's
// largest |w|; each weight to the nearest in log scale, 0 below 2^(kmax - 7.5).
void power_of_two_weights(Tensor& w, bool output_last);
// Whichever `grid` names (`levels` for int8).
void round_to_grid(Tensor& w, bool output_last, WeightGrid grid, float levels);

}  // namespace bks
