// Pass: fold inference BatchNorm, per-channel Scale and affine Power into the preceding
// Convolution or InnerProduct. Both are y = a[c] * x + b[c] per output channel c, so the layer's weights
// for channel c scale by a[c] and its bias becomes a[c] * bias[c] + b[c].
#include <fmt/format.h>

#include <cmath>

#include "graph/graph_edit.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

bool foldable_producer(const DeployModel& m, int p) {
  const Node& n = m.graph.nodes[p];
  if (n.param.has_fusion_param()) return false;
  if (n.type == "Convolution") return true;
  // InnerProduct's channels are its last axis; folding needs them on axis 1 of a 2-d output.
  return n.type == "InnerProduct" && m.graph.values[n.outputs[0]].shape.size() == 2;
}

// The per-channel affine map (a, b) of a BatchNorm / Scale node, or false when it is not
// one (BatchNorm computing batch statistics, Scale with a second bottom or other axes).
bool channel_affine(DeployModel& m, int n, int64_t channels, std::vector<double>& a, std::vector<double>& b) {
  const Node& node = m.graph.nodes[n];
  a.assign(channels, 1.0);
  b.assign(channels, 0.0);
  if (node.type == "BatchNorm") {
    const auto& bp = node.param.batch_norm_param();
    if (bp.has_use_global_stats() && !bp.use_global_stats()) return false;
    const Tensor &mean = m.blob(n, 0), &var = m.blob(n, 1), &factor = m.blob(n, 2);
    if (mean.numel() != channels) return false;
    double f = factor.f32()[0] == 0.f ? 0.0 : 1.0 / factor.f32()[0];  // Caffe's moving-average normaliser
    for (int64_t c = 0; c < channels; ++c) {
      double inv_std = 1.0 / std::sqrt(var.f32()[c] * f + bp.eps());
      a[c] = inv_std;
      b[c] = -mean.f32()[c] * f * inv_std;
    }
    return true;
  }
  if (node.type == "Power") {  // y = scale * x + shift when power is 1 (fold_constants)
    const auto& pp = node.param.power_param();
    if (pp.power() != 1.f) return false;
    a.assign(channels, pp.scale());
    b.assign(channels, pp.shift());
    return true;
  }
  if (node.type == "Scale") {
    const auto& sp = node.param.scale_param();
    if (node.inputs.size() != 1 || sp.axis() != 1 || sp.num_axes() != 1) return false;
    const Tensor& gamma = m.blob(n, 0);
    if (gamma.numel() != channels) return false;
    for (int64_t c = 0; c < channels; ++c) a[c] = gamma.f32()[c];
    if (sp.bias_term())
      for (int64_t c = 0; c < channels; ++c) b[c] = m.blob(n, 1).f32()[c];
    return true;
  }
  return false;
}

// Applies y = a * layer(x) + b to producer p's weights and bias (adding a bias if needed).
void fold_into(DeployModel& m, int p, const std::vector<double>& a, const std::vector<double>& b) {
  Node& node = m.graph.nodes[p];
  const bool conv = node.type == "Convolution";
  const bool transposed = !conv && node.param.inner_product_param().transpose();
  const int64_t channels = static_cast<int64_t>(a.size());
  Tensor& w = m.blob(p, 0);
  const int64_t per = w.numel() / channels;
  for (int64_t i = 0; i < w.numel(); ++i) {
    int64_t c = transposed ? i % channels : i / per;  // IP transposed: weights [k, n]
    w.f32()[i] = static_cast<float>(w.f32()[i] * a[c]);
  }
  ensure_bias(m, p, channels);
  Tensor& bias = m.blob(p, 1);
  for (int64_t c = 0; c < channels; ++c) bias.f32()[c] = static_cast<float>(bias.f32()[c] * a[c] + b[c]);
}

}  // namespace

PassReport fold_batchnorm(DeployModel& m) {
  PassReport r{"fold-batchnorm", {}};
  Graph& g = m.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    if (node.type != "BatchNorm" && node.type != "Scale" && node.type != "Power") continue;
    int p = g.values[node.inputs[0]].producer;
    if (p < 0 || dead[p] || !foldable_producer(m, p) || m.sole_consumer(p) != n) continue;
    const Node& prod = g.nodes[p];
    int64_t channels = g.values[prod.outputs[0]].shape.at(1);
    std::vector<double> a, b;
    if (!channel_affine(m, n, channels, a, b)) continue;
    if (weights_shared(m, p)) continue;
    // Private copies: the blobs may alias tensors the caller still uses.
    for (const ParamRef& ref : prod.params) m.weights[ref.key] = m.weights[ref.key].clone();
    fold_into(m, p, a, b);
    r.changes.push_back(fmt::format("folded {} '{}' into {} '{}'", node.type, node.name, g.nodes[p].type, g.nodes[p].name));
    absorb_into(g, p, n, dead);
  }
  erase_nodes(g, dead);
  return r;
}

}  // namespace bks
