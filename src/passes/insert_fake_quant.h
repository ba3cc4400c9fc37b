// Quantization-aware training (train --qat int8): the graph rewrite that makes a training
// net see, in its forward pass, the int8 rounding of the activations an INT8 deployment
// will apply.
#pragma once

#include <string>

#include "passes/deploy_model.h"

namespace bks {

// Puts a FakeQuant node (ops/fake_quant.cc) between every value and the Convolution /
// InnerProduct nodes reading it as their data input (one node per value, however many
// such readers it has). The node is named "<blob>/fake_quant" and writes
// "<blob>/fake_quant", so its range blob is "<blob>/fake_quant.0" in weights files, the
// same in the TRAIN and TEST nets of one prototxt. Other readers keep reading the value.
PassReport insert_fake_quant(Graph& g);

// The blob a weights-file entry written by insert_fake_quant's nodes holds the trained
// |x| range of ("pool1/fake_quant.0" -> "pool1"); "" for any other entry.
std::string fake_quant_blob(const std::string& param_key);

}  // namespace bks
