// Caffe's learning-rate policies: fixed, step, exp, inv, multistep, poly, sigmoid.
#pragma once

#include "caffe.pb.h"

namespace bks {

// Validates the policy's parameters (InputError naming the solver file and field).
void check_lr_policy(const proto::SolverParameter& p, const std::string& where);
float learning_rate(const proto::SolverParameter& p, int64_t iter);

}  // namespace bks
