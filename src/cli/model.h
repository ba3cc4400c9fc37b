// Shared by the verbs that run a model file: parse, build the net for a phase, load weights.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "formats/caffe_net.h"
#include "runtime/net.h"

namespace bks::cli {

struct LoadedModel {
  std::unique_ptr<CpuBackend> backend;
  ParamStore store;
  std::unique_ptr<Net> net;
};

// `phase` is "TRAIN" or "TEST" (case-insensitive); InputError otherwise.
Phase parse_phase(const std::string& phase);
// `stand_in`: data layers whose source is absent become Input layers (passes/stand_in_inputs.h)
// of `input_shape` ("N,C,H,W"; empty: the shape the layer implies), for timing without data.
std::unique_ptr<LoadedModel> load_model(const std::string& model, Phase phase, int threads,
                                        const StateFlags& state = {}, uint64_t seed = 1, bool stand_in = false,
                                        const std::string& input_shape = "");
// --stage (repeatable, or comma-separated) and --level, as `caffe time/test` take them.
void add_state_options(CLI::App* cmd, StateFlags& flags);
// A --batch value: a positive integer, or 'auto' (0, the batch that gives the most items/s).
// InputError naming `option` otherwise.
int64_t parse_batch(const std::string& text, const std::string& option);
// --input-shape, for time and deploy of a train_val file whose data is absent.
void add_input_shape_option(CLI::App* cmd, std::string& shape);
// --kernel TYPE=NAME (repeatable): layers of TYPE run the kernel NAME, for comparing kernels
// (`time --verbose` and the kernel column show the names). Applied by use_kernels() before
// the net is built; InputError for a malformed, unknown or unsuitable choice.
void add_kernel_option(CLI::App* cmd, std::vector<std::string>& choices);
void use_kernels(const std::vector<std::string>& choices);

}  // namespace bks::cli
