// Shared by the verbs that run a model file: parse, build the net for a phase, load weights.
#pragma once

#include <memory>
#include <string>

#include "runtime/net.h"

namespace bks::cli {

struct LoadedModel {
  std::unique_ptr<CpuBackend> backend;
  ParamStore store;
  std::unique_ptr<Net> net;
};

// `phase` is "TRAIN" or "TEST" (case-insensitive); InputError otherwise.
Phase parse_phase(const std::string& phase);
std::unique_ptr<LoadedModel> load_model(const std::string& model, Phase phase, int threads, uint64_t seed = 1);

}  // namespace bks::cli
