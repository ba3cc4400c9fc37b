#include "runtime/param_binding.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "ops/shape_inference.h"
#include "runtime/filler.h"

namespace bks {

ParamDecls declared_params(const Graph& g, Phase phase) {
  return [&g, phase](int n) {
    OpContext c{g.nodes[n], g.describe(n), phase};
    std::vector<ParamDecl> decls = op_def(g, n).params(c, input_shapes(g, n));
    for (size_t i = 0; i < decls.size(); ++i)
      if (std::string problem = shape_problem(decls[i].shape, sizeof(float)); !problem.empty())
        c.fail("parameter blob {}: {}", i, problem);
    return decls;
  };
}

std::vector<std::vector<int>> bind_parameters(Graph& g, ParamStore& store, uint64_t seed, const ParamDecls& decls_of,
                                              bool fill) {
  std::vector<std::vector<int>> node_params(g.nodes.size());
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    std::vector<ParamDecl> decls = decls_of(n);
    if (node.param_specs.size() > decls.size())
      input_error("{}: {} 'param' specs given but the layer has {} parameter blob(s)", g.describe(n),
                  node.param_specs.size(), decls.size());
    node.params.clear();
    for (size_t i = 0; i < decls.size(); ++i) {
      ParamSpec spec = i < node.param_specs.size() ? node.param_specs[i] : ParamSpec();
      ParamRef ref;
      ref.key = fmt::format("{}.{}", node.name, i);
      ref.share_name = spec.share_name;
      ref.lr_mult = decls[i].learnable ? spec.lr_mult : 0.f;
      ref.decay_mult = decls[i].learnable ? spec.decay_mult : 0.f;
      int idx = ref.share_name.empty() ? -1 : store.find_shared(ref.share_name);
      if (idx < 0) idx = store.find(ref.key);
      if (idx >= 0) {
        const Shape& have = store.at(idx).data.shape();
        if (have != decls[i].shape)
          input_error("{}: parameter blob {} has shape {} but the shared/existing blob '{}' has {}", g.describe(n), i,
                      shape_str(decls[i].shape), store.at(idx).key, shape_str(have));
      } else {
        idx = store.add(ref.key, ref.share_name, decls[i].shape, decls[i].learnable);
        Param& p = store.at(idx);
        p.lr_mult = ref.lr_mult;
        p.decay_mult = ref.decay_mult;
        if (fill) {
          Rng rng = Rng::derive(seed, ref.key);
          fill_tensor(p.data, decls[i].filler, rng, g.describe(n));
        }
      }
      node.params.push_back(ref);
      node_params[n].push_back(idx);
    }
  }
  return node_params;
}

}  // namespace bks
