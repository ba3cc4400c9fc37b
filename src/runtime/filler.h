// Caffe's weight fillers: constant, gaussian (with sparse), uniform, xavier, msra, bilinear,
// positive_unitball. Fan-in/fan-out follow Caffe: fan_in = count / shape[0],
// fan_out = count / shape[1].
#pragma once

#include "core/rng.h"
#include "core/tensor.h"
#include "graph/attrs.h"

namespace bks {

// Fills `t` (f32). Throws InputError (prefixed with `where`) for an unknown filler type.
void fill_tensor(Tensor& t, const FillerSpec& f, Rng& rng, const std::string& where);

}  // namespace bks
