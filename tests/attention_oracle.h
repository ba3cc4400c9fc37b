// MultiHeadAttention as the tests write it down: every product in double, no stabilisers,
// shared by the attention op tests and the registry sweep.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace bks::test {

struct AttentionSpec {
  int64_t heads = 1, head_dim = 0, out = 0;  // 0: the bottom's width / heads, the bottom's width
  bool causal = false, performer = false, bias = true;
};

// The top of a MultiHeadAttention layer over x (T, N, D) with parameters in the layer's
// order (W_qkv, b_qkv, W_o, b_o, and PERFORMER's features last). PERFORMER: the estimate
// with exactly those features, exp(w_i . x~ - |x~|^2 / 2) for queries and keys alike.
Tensor attention_oracle(const AttentionSpec& s, const Tensor& x, const std::vector<Tensor>& params);

}  // namespace bks::test
