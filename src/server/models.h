// Models for the dashboard: a standard network (LeNet, CIFAR-10 quick, a small ResNet) or a
// custom prototxt, bound to a dataset, with solver settings. Sweeps: base_lr and batch_size
// may be lists; each combination becomes one training job.
#pragma once

#include <string>
#include <vector>

#include "caffe.pb.h"
#include "server/store.h"

namespace bks::server {

// Characters a text dataset's networks read per stream and batch (TextData's seq_len).
constexpr int64_t kTextSeqLen = 50;

// What a packed dataset offers a network (from its info.json).
struct DatasetView {
  std::string dir;             // holds train.h5, val.h5 (images) or text.txt (text)
  std::vector<int64_t> shape;  // C, H, W (images)
  // Text datasets: classes is the vocabulary's size, and the counts are characters.
  bool text = false;
  double holdout = -1;  // the fraction of the text held out, as packed (-1: not a text dataset)
  int64_t classes = 0, train_count = 0, val_count = 0;
  // The classes' names (text: the characters), as info.json lists them; `classes` of them.
  std::vector<std::string> class_names;
};

struct Validation {
  bool ok = true;
  std::string error;  // one line naming the layer and field where known, not the place (below)
  int line = 0;       // 1-based line of the custom prototxt; 0 when unknown
  int column = 0;     // 1-based column on that line; 0 when unknown
};

// The train/test prototxt of a standard network reading `d` with this batch size: lenet,
// cifar10_quick, resnet (image datasets) or char_rnn (text datasets).
std::string standard_network(const std::string& name, const DatasetView& d, int64_t batch);
// Builds the net in both phases; ApiError(400, field) saying what is wrong otherwise (a
// standard network on images too small for it, say).
void check_builds(const std::string& text, const std::string& field);
// A standard network's layers after its data layers (what the editor starts a custom
// network from: they read 'data' and 'label', or on text 'chars', 'cont' and 'next').
std::string standard_layers(const std::string& name, const DatasetView& d);
// A custom network (its own data layers are replaced by ones reading `d`), as prototxt
// text; throws ApiError(400, "prototxt") saying "line N: what" when it does not parse or
// build.
std::string custom_network(const std::string& text, const DatasetView& d, int64_t batch);
// Parses and builds `text` (for the editor's validate button) without a dataset: data
// layers become inputs of `shape`. A network over the server's size budget (models.cc: 2^28
// floats of parameters, 2^26 floats of blobs per image) throws ApiError 413 naming the
// layer, as check_builds and custom_network do.
Validation validate_prototxt(const std::string& text, const std::vector<int64_t>& shape);
// The same on `d`'s data: images as inputs of its shape, text through its TextData layers.
Validation validate_prototxt(const std::string& text, const DatasetView& d);

// The solver settings of a model request, validated (ApiError naming the field).
json validate_solver(const json& body);
// Solver prototxt for one job of a sweep: base_lr and batch size chosen; iterations from
// epochs and the dataset's size.
std::string solver_text(const json& solver, double base_lr, int64_t batch, const DatasetView& d);
int64_t iterations_per_epoch(int64_t batch, const DatasetView& d);
// The same solver (without the test settings, which need the dataset) as Caffe's message,
// for `ipe` iterations per epoch: what the learning-rate schedule preview evaluates.
proto::SolverParameter solver_parameter(const json& solver, double base_lr, int64_t ipe);

}  // namespace bks::server
