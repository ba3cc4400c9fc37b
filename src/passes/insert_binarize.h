// XNOR-Net training and deployment (train --qat xnor): the graph rewrite that makes the
// Convolution / InnerProduct layers between the first and the last read the signs of their
// inputs (the first reads the data, the last makes the scores: both stay in float, as
// XNOR-Net keeps them).
#pragma once

#include "passes/deploy_model.h"

namespace bks {

// Puts a Binarize node (ops/binarize.cc) between every value and the Convolution /
// InnerProduct nodes reading it as their data input, except the first and the last such
// node of the graph; one node per value, named "<blob>/binarize". Shapes, where the graph
// has them, carry over. Other readers keep reading the value.
PassReport insert_binarize(Graph& g);

// Deploy, after the other passes: each Convolution (group 1) / InnerProduct that reads a
// Binarize and whose weights are binary (every output channel's +-one magnitude) becomes a
// BinaryConvolution / BinaryInnerProduct reading the Binarize's input (the XNOR + popcount
// kernels); a Binarize left without readers goes.
PassReport binarize_layers(DeployModel& m);

}  // namespace bks
