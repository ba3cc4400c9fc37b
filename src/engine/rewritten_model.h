// Where a rewritten model goes: factorize, prune-channels and optimize's candidates each
// leave a Caffe net and its weights in a directory, to fine-tune, deploy or time like any other.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "caffe.pb.h"
#include "core/tensor.h"

namespace bks {

// OUT/net.prototxt (headed by `comment`) and OUT/weights.safetensors (naming the model and
// weights it came from), each written atomically. Returns the two paths.
std::pair<std::string, std::string> write_rewritten_model(const std::string& out, const proto::NetParameter& net,
                                                          const std::map<std::string, Tensor>& weights,
                                                          const std::string& comment, const std::string& model,
                                                          const std::string& source_weights);

}  // namespace bks
