#include "train/lr_policy.h"

#include <cmath>

#include "core/error.h"

namespace bks {

void check_lr_policy(const proto::SolverParameter& p, const std::string& where) {
  const std::string& pol = p.lr_policy();
  if (pol.empty()) input_error("{}: lr_policy is required", where);
  if (pol == "fixed" || pol == "exp" || pol == "inv") return;
  if (pol == "step") {
    if (p.stepsize() <= 0) input_error("{}: lr_policy \"step\" needs a positive stepsize", where);
  } else if (pol == "multistep") {
    for (int i = 1; i < p.stepvalue_size(); ++i)
      if (p.stepvalue(i) <= p.stepvalue(i - 1)) input_error("{}: stepvalue must increase", where);
  } else if (pol == "poly") {
    if (p.max_iter() <= 0) input_error("{}: lr_policy \"poly\" needs max_iter", where);
  } else if (pol == "sigmoid") {
  } else {
    input_error("{}: unknown lr_policy \"{}\" (fixed, step, exp, inv, multistep, poly, sigmoid)", where, pol);
  }
}

float learning_rate(const proto::SolverParameter& p, int64_t iter) {
  const std::string& pol = p.lr_policy();
  double base = p.base_lr(), it = static_cast<double>(iter);
  if (pol == "fixed") return static_cast<float>(base);
  if (pol == "step") return static_cast<float>(base * std::pow(p.gamma(), std::floor(it / p.stepsize())));
  if (pol == "exp") return static_cast<float>(base * std::pow(p.gamma(), it));
  if (pol == "inv") return static_cast<float>(base * std::pow(1.0 + p.gamma() * it, -static_cast<double>(p.power())));
  if (pol == "multistep") {
    int passed = 0;
    while (passed < p.stepvalue_size() && iter >= p.stepvalue(passed)) ++passed;
    return static_cast<float>(base * std::pow(p.gamma(), passed));
  }
  if (pol == "poly") return static_cast<float>(base * std::pow(1.0 - it / p.max_iter(), p.power()));
  if (pol == "sigmoid") return static_cast<float>(base / (1.0 + std::exp(-p.gamma() * (it - p.stepsize()))));
  return static_cast<float>(base);
}

}  // namespace bks
