// Binarize: XNOR-Net's binary activations (train --qat xnor puts one before each binarized
// Convolution / InnerProduct, passes/insert_binarize.h). y = +1 where x >= 0, -1 elsewhere
// (0 maps to +1, as the XNOR kernels' bits do); backward is the straight-through estimator
// of hard tanh: dx = dy where |x| <= 1, 0 elsewhere.
#include <cmath>

#include "ops/elementwise.h"

namespace bks {
namespace {

struct BinarizeFn {
  static BinarizeFn from(const OpContext&) { return {}; }
  static void add_traits(const Node&, OpTraits&) {}
  // f(0) = 1: blocked layouts' zero padding would not stay zero.
  ElementwiseFlow flow() const { return {true, false, false}; }
  float f(float x) const { return x >= 0.f ? 1.f : -1.f; }
  float grad(float x, float) const { return std::fabs(x) <= 1.f ? 1.f : 0.f; }
};

}  // namespace

BKS_REGISTER_ELEMENTWISE("Binarize", BinarizeFn);

}  // namespace bks
