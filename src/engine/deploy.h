// `bakusoku deploy`: from a trained network (deploy prototxt, or a train/test prototxt whose
// TEST phase is used) and its weights to an optimised inference bundle.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/bundle.h"
#include "passes/deploy_model.h"

namespace bks {

struct DeployOptions {
  std::string model, weights;
  std::string precision = "fp32";
  int64_t batch = 0;  // 0: the batch the net declares
  int threads = 0;
};

struct DeployResult {
  Bundle bundle;
  std::vector<PassReport> reports;
  std::map<std::string, Shape> shapes;  // every blob of the optimised graph (batch as declared)
};

// InputError unless this CPU has bfloat16 instructions (AVX-512 BF16 or AMX).
void require_bf16();
// Builds the TEST-phase model with its weights (the model and weights as loaded, before
// any pass), for deploy and for comparing against the optimised graph.
DeployModel load_deploy_model(const DeployOptions& o);
// load_deploy_model + every pass + the bundle. `after_each` sees the model before the first
// pass (with an empty report) and after each pass.
DeployResult deploy(const DeployOptions& o,
                    const std::function<void(const PassReport&, const DeployModel&)>& after_each = {});

}  // namespace bks
