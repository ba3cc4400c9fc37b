#include "runtime/param_binding.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

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

namespace {

// The multipliers given for a blob so far in this net, and the layer that gave them.
struct Given {
  int node;
  ParamSpec spec;
};

// Node n shares a blob first used by `owner`: a multiplier both give must be equal, and one
// only n gives holds for the blob from now on (Caffe's Net::AppendParam).
void agree_on_multipliers(const Graph& g, int n, const ParamSpec& spec, bool learnable, int blob, Given& owner,
                          ParamSink& sink) {
  bool adopt = false;
  for (auto [name, has, value, owner_has, owner_value] :
       {std::tuple{"lr_mult", spec.has_lr_mult, spec.lr_mult, &owner.spec.has_lr_mult, &owner.spec.lr_mult},
        std::tuple{"decay_mult", spec.has_decay_mult, spec.decay_mult, &owner.spec.has_decay_mult,
                   &owner.spec.decay_mult}}) {
    if (!has) continue;
    if (*owner_has && *owner_value != value)
      input_error(
          "{}: shared parameter '{}' has {} {} here but {} in layer '{}' (Caffe refuses mismatched multipliers)",
          g.describe(n), spec.share_name, name, value, *owner_value, g.nodes[owner.node].name);
    if (!*owner_has) *owner_has = true, *owner_value = value, adopt = true;
  }
  if (adopt && learnable) sink.set_multipliers(blob, owner.spec.lr_mult, owner.spec.decay_mult);
}

}  // namespace

std::vector<std::vector<int>> resolve_parameters(Graph& g, const ParamDecls& decls_of, ParamSink& sink) {
  std::vector<std::vector<int>> node_params(g.nodes.size());
  std::map<int, Given> given;  // per blob used in this net
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
      // A shared name finds its blob first, then the blob's own key (the TEST net binds to
      // the TRAIN net's blobs by key).
      int idx = ref.share_name.empty() ? -1 : sink.find_shared(ref.share_name);
      if (idx < 0) idx = sink.find_key(ref.key);
      if (idx >= 0) {
        if (sink.shape(idx) != decls[i].shape)
          input_error("{}: parameter blob {} has shape {} but the shared/existing blob '{}' has {}", g.describe(n), i,
                      shape_str(decls[i].shape), sink.key(idx), shape_str(sink.shape(idx)));
      } else {
        idx = sink.add(n, ref, decls[i]);
      }
      if (auto [it, first] = given.try_emplace(idx, Given{n, spec}); !first && !spec.share_name.empty())
        agree_on_multipliers(g, n, spec, decls[i].learnable, idx, it->second, sink);
      node.params.push_back(ref);
      node_params[n].push_back(idx);
    }
  }
  return node_params;
}

namespace {

// New blobs filled from a stream derived from the seed and their key (unless `fill` is off).
class StoreSink : public ParamSink {
 public:
  StoreSink(const Graph& g, ParamStore& store, uint64_t seed, bool fill)
      : g_(g), store_(store), seed_(seed), fill_(fill) {}
  int find_shared(const std::string& share_name) const override { return store_.find_shared(share_name); }
  int find_key(const std::string& key) const override { return store_.find(key); }
  const Shape& shape(int blob) const override { return store_.at(blob).data.shape(); }
  const std::string& key(int blob) const override { return store_.at(blob).key; }
  int add(int node, const ParamRef& ref, const ParamDecl& decl) override {
    const int idx = store_.add(ref.key, ref.share_name, decl.shape, decl.learnable);
    Param& p = store_.at(idx);
    p.lr_mult = ref.lr_mult;
    p.decay_mult = ref.decay_mult;
    if (fill_) {
      Rng rng = Rng::derive(seed_, ref.key);
      fill_tensor(p.data, decl.filler, rng, g_.describe(node));
    }
    return idx;
  }
  void set_multipliers(int blob, float lr_mult, float decay_mult) override {
    store_.at(blob).lr_mult = lr_mult;
    store_.at(blob).decay_mult = decay_mult;
  }

 private:
  const Graph& g_;
  ParamStore& store_;
  uint64_t seed_;
  bool fill_;
};

}  // namespace

std::vector<std::vector<int>> bind_parameters(Graph& g, ParamStore& store, uint64_t seed, const ParamDecls& decls_of,
                                              bool fill) {
  StoreSink sink(g, store, seed, fill);
  return resolve_parameters(g, decls_of, sink);
}

}  // namespace bks
