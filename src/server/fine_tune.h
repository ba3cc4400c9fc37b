// A training job that starts from another job's weights (the dashboard's "fine-tune from
// this job"): which snapshot, and per-layer learning-rate multipliers on the new network.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bks::server {

struct Context;

// The file a fine-tuning job's directory holds its starting weights in: "init" and the
// source's extension (.safetensors or .caffemodel, which tells train how to read it).
std::string fine_tune_file_name(const std::string& source);

// The weights file body["weights_from"] names: {"job_id", "iter"}, a training job's
// snapshot, or {"file": PATH}, a .safetensors or .caffemodel inside the import folders
// `roots`; ApiError(400, "weights_from") saying what is wrong.
std::string fine_tune_weights(Context& c, const nlohmann::json& weights_from, const std::vector<std::string>& roots);

// Checks body["lr_mult"] ({"layer": multiplier, ...}, at most 100, each 0..1000) and
// returns it as an object (empty when absent).
nlohmann::json lr_mult_field(const nlohmann::json& body);

// `net_text` (a whole train/test prototxt) with every blob of each layer in `mults` given
// that lr_mult (0 freezes it); other settings of the layer's param specs are kept.
// ApiError(400, "lr_mult") for a layer the net lacks or one without learnable blobs.
std::string with_lr_mults(const std::string& net_text, const nlohmann::json& mults);

}  // namespace bks::server
