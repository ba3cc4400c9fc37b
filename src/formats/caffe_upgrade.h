// Caffe's upgrades of old net and solver files (its util/upgrade_proto.cpp), so files from
// the original model zoo load unchanged: V0 nets (`layers { layer { type: "conv" } }`, with
// separate "padding" layers) and V1 nets (`layers { type: CONVOLUTION blobs_lr: 1 }`) become
// the current `layer` form, old data-layer transformation fields move to transform_param,
// and a solver's `solver_type: SGD` enum becomes `type: "SGD"`.
#pragma once

#include <string>
#include <vector>

#include "caffe.pb.h"

namespace bks {

enum class NetFormat { current, v1, v0 };
const char* net_format_name(NetFormat f);  // "current", "V1", "V0"

// Upgrades `net` in place to the current format and says which format it was in. `where`
// names the file for errors; `lines`, when given, holds the source lines read_prototxt
// gives (of each `layers` entry; of each `layer` if there are any) on entry and of each
// upgraded `layer` on return (V0 padding layers disappear).
// InputError, naming the layer, for what Caffe refuses: `layer` and `layers` in one file,
// an unknown V0 type, a padding layer that feeds anything but one convolution or pooling.
NetFormat upgrade_net(proto::NetParameter& net, const std::string& where, std::vector<int>* lines = nullptr);

// The further upgrades Caffe's upgrade_net_proto_* tools write out (on load bakusoku reads
// these forms directly): net-level input/input_shape/input_dim become an Input layer in
// front, and a BatchNorm's three param specs get lr_mult and decay_mult 0.
void upgrade_net_input(proto::NetParameter& net, const std::string& where);
void upgrade_batch_norm_params(proto::NetParameter& net);

// solver_type (enum) -> type (string); true if the solver used it. InputError when both
// are given, as in Caffe.
bool upgrade_solver(proto::SolverParameter& solver, const std::string& where);

// Reads a solver prototxt with Caffe's solver upgrade applied, and the nets written inside
// it (net_param, train_net_param, test_net_param) upgraded like net files. One log line for
// each upgrade made.
void read_solver_file(const std::string& path, proto::SolverParameter& solver);

}  // namespace bks
