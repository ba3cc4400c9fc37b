// Quantization-aware training's weights (train --qat int8|binary|pow2): the forward and
// backward passes see every Convolution / InnerProduct weight rounded to a grid, one per
// output channel, while the solver updates the float weights (the straight-through
// estimator: the gradient with respect to the rounded weights is applied to the float ones).
// The grids are ops/weight_grids.h.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/param_store.h"
#include "ops/weight_grids.h"
#include "runtime/net.h"

namespace bks {

class WeightFakeQuant {
 public:
  // The weights (blob 0) of `net`'s Convolution and InnerProduct nodes, each once; `levels`
  // for the int8 grid. `float_ends`: the first and the last of them stay float (binary
  // nets keep them so, as XNOR-Net does: the first sees the raw data through few weights,
  // the last makes the scores).
  WeightFakeQuant(ParamStore& store, const Net& net, WeightGrid grid, float levels, bool float_ends = false);
  // Keeps the float weights and writes their rounded values in their place.
  void quantize();
  // Puts the float weights back (before the solver updates them, before a snapshot).
  void restore();
  int layers() const { return static_cast<int>(weights_.size()); }
  // The store keys of the weights left float, in node order.
  const std::vector<std::string>& float_keys() const { return float_keys_; }

 private:
  struct Weight {
    int param;         // store index
    bool output_last;  // stored [inputs, outputs] (InnerProduct's transpose)
    Tensor kept;       // the float weights while quantized
  };
  ParamStore& store_;
  WeightGrid grid_;
  float levels_;
  std::vector<Weight> weights_;
  std::vector<std::string> float_keys_;
  bool quantized_ = false;
};

}  // namespace bks
