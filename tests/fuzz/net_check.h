// The path `bakusoku deploy` and `bakusoku time` take from a parsed net up to, but not
// including, allocating its weights: the graph of each phase, shape inference and the
// parameter blobs each node declares. Data layers read small fixture files (an IDX pair,
// an HDF5 file and a list naming it) written beside the net, under their usual names.
#pragma once

#include "formats/caffe_net.h"

namespace bks::fuzz {

// Writes the fixtures into scratch_dir() (once per process).
void write_data_fixtures();
// False when a data source or mean file points outside the scratch directory (an absolute
// path or ".."): reading whatever file that names is not what the harness tests.
bool sources_stay_local(const proto::NetParameter& net);
// Builds, infers and declares for the TRAIN and the TEST phase.
void check_net_phases(const NetLoad& net);
// Infers and declares for an already built graph.
void check_graph(Graph& g, Phase phase);

}  // namespace bks::fuzz
