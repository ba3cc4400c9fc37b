// Pass: bf16 inference. The weighted layers (convolutions, inner products) carry nearly all
// the arithmetic, and oneDNN's bf16 kernels for them convert at their edges, so only they
// switch; everything else stays f32.
#include <fmt/format.h>

#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {

PassReport compute_in_bf16(Graph& g) {
  PassReport r{"compute-in-bf16", {}};
  for (Node& n : g.nodes) {
    if (!op_traits(n).weighted_linear || n.deploy.precision != Precision::fp32) continue;
    n.deploy.precision = Precision::bf16;
    r.changes.push_back(fmt::format("{} '{}'", n.type, n.name));
  }
  return r;
}

}  // namespace bks
