// Quantization-aware training's weights (train --qat int8): the forward and backward
// passes see every Convolution / InnerProduct weight rounded to the int8 grid deploy will
// store it on (symmetric, one scale per output channel: max |w| maps to `levels`), while the
// solver updates the float weights (the straight-through estimator: the gradient with
// respect to the rounded weights is applied to the float ones).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "graph/param_store.h"
#include "runtime/net.h"

namespace bks {

class WeightFakeQuant {
 public:
  // The weights (blob 0) of `net`'s Convolution and InnerProduct nodes, each once.
  WeightFakeQuant(ParamStore& store, const Net& net, float levels);
  // Keeps the float weights and writes their rounded values in their place.
  void quantize();
  // Puts the float weights back (before the solver updates them, before a snapshot).
  void restore();
  int layers() const { return static_cast<int>(weights_.size()); }

 private:
  struct Weight {
    int param;         // store index
    bool output_last;  // stored [inputs, outputs] (InnerProduct's transpose)
    Tensor kept;       // the float weights while quantized
  };
  ParamStore& store_;
  float levels_;
  std::vector<Weight> weights_;
  bool quantized_ = false;
};

// Rounds `w` (a weight blob whose output channels are axis 0, or the last axis when
// `output_last`) to the grid of `levels` steps per side of zero, one scale per output
// channel; what WeightFakeQuant::quantize writes.
void fake_quantize_weights(Tensor& w, bool output_last, float levels);

}  // namespace bks
