#include "runtime/evaluate.h"

#include <algorithm>

namespace bks {

Evaluation evaluate(Net& net, int batches, int64_t first_step, int part, int parts) {
  const auto& outs = net.outputs();
  Evaluation e;
  e.output_means.assign(outs.size(), 0.0);
  for (int i = part; i < batches; i += parts) {
    ++e.batches;
    e.loss += net.forward(first_step + i);
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor v = net.host_value(outs[k]);
      double s = 0;
      for (int64_t j = 0; j < v.numel(); ++j) s += v.f32()[j];
      e.output_means[k] += s / static_cast<double>(std::max<int64_t>(v.numel(), 1));
    }
  }
  const int n = std::max(e.batches, 1);
  for (auto& m : e.output_means) m /= n;
  e.loss /= n;
  return e;
}

}  // namespace bks
