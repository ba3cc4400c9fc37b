// Low-rank factorisation of InnerProduct and Convolution layers (bakusoku factorize,
// docs/compression.md): a trained W (outputs x inputs, a convolution's inputs being its
// channels x kernel taps) becomes two layers of rank r by truncated SVD,
//   W ~ (U_r S_r^1/2) (S_r^1/2 V_r^T),
// "<layer>/low_rank" (r outputs, no bias; a convolution's r filters keep its kernel, stride,
// pad and dilation) then "<layer>" (its outputs and bias, weights outputs x r; a 1x1
// convolution). The result is a Caffe net and weights file like any other: fine-tune it with
// train --weights, deploy it, time it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "core/tensor.h"

namespace bks {

struct LowRankOptions {
  int64_t rank = 0;                 // every chosen layer to this rank (0: by energy)
  double energy = 0.9;              // else the smallest rank keeping this fraction of sum sigma^2
  std::vector<std::string> layers;  // layers to factorise (empty: each one the rank makes smaller)
};

struct LowRankLayer {
  std::string name;
  int64_t outputs = 0, inputs = 0, rank = 0;
  double energy = 0;        // of sum sigma^2, the fraction the rank keeps
  bool factorised = false;  // false: the rank would not make it smaller (left as it was)
};

struct LowRankResult {
  proto::NetParameter net;                // the model with the factorised layers
  std::map<std::string, Tensor> weights;  // every blob, "<layer>.<index>"
  std::vector<LowRankLayer> layers;
};

// The factorisation of the model (a train/test or deploy prototxt) with its weights. InputError
// naming the layer for a rank above min(outputs, inputs) or below 1, an energy outside (0, 1],
// a named layer that is not an InnerProduct or Convolution of the model, a transposed
// InnerProduct or a grouped Convolution.
LowRankResult factorize_low_rank(const std::string& model, const std::string& weights, const LowRankOptions& o);

// The singular values of the row-major m x n matrix `a` (descending) and, when u/vt are not
// null, the thin U (m x k) and V^T (k x n), k = min(m, n), row-major.
std::vector<float> singular_values(const float* a, int64_t m, int64_t n, std::vector<float>* u = nullptr,
                                   std::vector<float>* vt = nullptr);

}  // namespace bks
