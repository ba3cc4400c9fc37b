// Caffe's recurrent layers (RNN, LSTM) and bakusoku's GRU as the tests write them down:
// timestep by timestep in double, shared by the recurrent op tests and the registry sweep.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace bks::test {

enum class Cell { rnn, lstm, gru };

// The outputs of a `cell` layer of num_output h over inputs `in` (x (T, N, ...), cont
// (T, N), then the static input when `has_static`, then with `exposed` the initial states)
// and parameters `params` in the layer's order: the sequence output, then with `exposed`
// the final states. Without `exposed` the initial states are zero.
std::vector<Tensor> recurrent_oracle(Cell cell, int64_t h, bool has_static, bool exposed, const std::vector<Tensor>& in,
                                     const std::vector<Tensor>& params);

}  // namespace bks::test
