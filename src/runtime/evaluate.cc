#include "runtime/evaluate.h"

#include <algorithm>

namespace bks {

Evaluation evaluate(Net& net, int batches, int64_t first_step) {
  const auto& outs = net.outputs();
  Evaluation e;
  e.output_means.assign(outs.size(), 0.0);
  for (int i = 0; i < batches; ++i) {
    e.loss += net.forward(first_step + i);
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor& v = net.value(outs[k]);
      double s = 0;
      for (int64_t j = 0; j < v.numel(); ++j) s += v.f32()[j];
      e.output_means[k] += s / static_cast<double>(std::max<int64_t>(v.numel(), 1));
    }
  }
  for (auto& m : e.output_means) m /= batches;
  e.loss /= batches;
  return e;
}

}  // namespace bks
