// Caffe's debug_info: per-blob statistics logged as the net runs (Net::ForwardDebugInfo,
// BackwardDebugInfo, UpdateDebugInfo and the parameter norms at the end of Net::Backward),
// with Caffe's wording, so logs of the two can be compared line by line.
#include <cmath>
#include <map>

#include "core/log.h"
#include "runtime/net.h"

namespace bks {
namespace {

// Sums over the whole buffer: blocked layouts keep their padding at zero, so this is right
// for every layout.
double abs_sum(const Tensor& t) {
  const float* p = t.f32();
  double s = 0;
  for (int64_t i = 0; i < t.phys_numel(); ++i) s += std::fabs(p[i]);
  return s;
}
double sq_sum(const Tensor& t) {
  const float* p = t.f32();
  double s = 0;
  for (int64_t i = 0; i < t.phys_numel(); ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}
// Caffe's asum / count, printed as its stream would (6 significant digits).
std::string abs_mean(const Tensor& t) {
  int64_t n = t.numel();
  return fmt::format("{:g}", n > 0 ? static_cast<float>(abs_sum(t) / static_cast<double>(n)) : 0.f);
}

}  // namespace

// Caffe's param display name: the sharing name when given, else the blob's index.
std::string Net::param_display_name(int n, int i) const {
  const Node& node = graph_.nodes[n];
  if (i < static_cast<int>(node.param_specs.size()) && !node.param_specs[i].share_name.empty())
    return node.param_specs[i].share_name;
  return std::to_string(i);
}

void Net::forward_debug_info(int n) {
  const Node& node = graph_.nodes[n];
  for (int v : node.outputs)
    log::info("    [Forward] Layer {}, top blob {} data: {}", node.name, graph_.values[v].name, abs_mean(data_[v]));
  for (size_t i = 0; i < node_params_[n].size(); ++i)
    log::info("    [Forward] Layer {}, param blob {} data: {}", node.name, param_display_name(n, static_cast<int>(i)),
              abs_mean(store_.at(node_params_[n][i]).data));
}

// What this node wrote: each bottom's gradient contribution (Caffe's split layers give each
// consumer its own diff) and each parameter's gradient summed so far.
void Net::backward_debug_info(int n) {
  const Node& node = graph_.nodes[n];
  const OpCall& c = calls_[n];
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (c.in_grad[i])
      log::info("    [Backward] Layer {}, bottom blob {} diff: {}", node.name, graph_.values[node.inputs[i]].name,
                abs_mean(*c.in_grad[i]));
  for (size_t i = 0; i < node_params_[n].size(); ++i)
    if (c.param_grad[i])
      log::info("    [Backward] Layer {}, param blob {} diff: {}", node.name, i,
                abs_mean(store_.at(node_params_[n][i]).grad));
}

void Net::backward_norms_debug_info() {
  double asum_data = 0, asum_diff = 0, sq_data = 0, sq_diff = 0;
  for (int idx : param_indices_) {
    const Param& p = store_.at(idx);
    asum_data += abs_sum(p.data);
    sq_data += sq_sum(p.data);
    if (p.grad.defined()) {
      asum_diff += abs_sum(p.grad);
      sq_diff += sq_sum(p.grad);
    }
  }
  log::info("    [Backward] All net params (data, diff): L1 norm = ({:g}, {:g}); L2 norm = ({:g}, {:g})",
            static_cast<float>(asum_data), static_cast<float>(asum_diff), static_cast<float>(std::sqrt(sq_data)),
            static_cast<float>(std::sqrt(sq_diff)));
}

void Net::update_debug_info() {
  std::map<int, std::pair<int, int>> owner;  // store index -> (node, blob) that declared it first
  for (int n = 0; n < num_nodes(); ++n)
    for (size_t i = 0; i < node_params_[n].size(); ++i) {
      int idx = node_params_[n][i];
      const Param& p = store_.at(idx);
      const std::string& layer = graph_.nodes[n].name;
      std::string diff = p.grad.defined() ? abs_mean(p.grad) : "0";
      auto [it, first] = owner.try_emplace(idx, n, static_cast<int>(i));
      if (first) {
        log::info("    [Update] Layer {}, param {} data: {}; diff: {}", layer, param_display_name(n, static_cast<int>(i)),
                  abs_mean(p.data), diff);
      } else {
        auto [on, oi] = it->second;
        log::info("    [Update] Layer {}, param blob {} (owned by layer {}, param {}) diff: {}", layer,
                  param_display_name(n, static_cast<int>(i)), graph_.nodes[on].name, param_display_name(on, oi), diff);
      }
    }
}

}  // namespace bks
