// Pass: a convolution whose outer kernel taps read only padding, at every output position,
// keeps the taps that read input. A 3x3 convolution with pad 1 over a 1x1 plane (the last
// stage of a ResNet on 32x32 images) is a 1x1 convolution: nine times less arithmetic that
// the direct kernel would spend on zeros.
#include <fmt/format.h>

#include <cstring>

#include "ops/conv_attrs.h"
#include "ops/op_def.h"
#include "passes/deploy_model.h"

namespace bks {
namespace {

struct Taps {
  int64_t first = 0, count = 0, pad = 0;
};

// The taps of one axis that read input for some output position, and the pad that keeps
// the windows where they were; count 0 when trimming would not keep Caffe's symmetric pad
// and output extent.
Taps used_taps(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  int64_t first = k, last = -1;
  for (int64_t t = 0; t < k; ++t)
    for (int64_t o = 0; o < out; ++o) {
      const int64_t at = o * s - p + t * d;
      if (at >= 0 && at < in) {
        first = std::min(first, t);
        last = std::max(last, t);
        break;
      }
    }
  if (last < 0) return {};
  Taps r{first, last - first + 1, p - first * d};
  const int64_t extent = (r.count - 1) * d + 1;
  if (r.pad < 0 || (in + 2 * r.pad - extent) / s + 1 != out || in + 2 * r.pad < extent) return {};
  return r;
}

}  // namespace

PassReport trim_padded_taps(DeployModel& m) {
  PassReport r{"trim-padded-taps", {}};
  Graph& g = m.graph;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n) {
    Node& node = g.nodes[n];
    auto* a = dynamic_cast<ConvAttrs*>(node.attrs.get());
    if (!a || !op_traits(node).convolution || !op_traits(node).weighted_linear || a->kernel.size() != 2 ||
        node.params.empty() || weights_shared(m, n))
      continue;
    const Shape& x = g.values[node.inputs[0]].shape;
    const Shape& y = g.values[node.outputs[0]].shape;
    if (x.size() != 4 || y.size() != 4) continue;
    Taps t[2];
    bool trims = false;
    for (int ax = 0; ax < 2; ++ax) {
      t[ax] = used_taps(x[2 + ax], y[2 + ax], a->kernel[ax], a->stride[ax], a->pad[ax], a->dilation[ax]);
      if (t[ax].count == 0) break;
      trims = trims || t[ax].count < a->kernel[ax];
    }
    if (!trims || t[0].count == 0 || t[1].count == 0) continue;
    Tensor& w = m.blob(n, 0);
    const int64_t planes = w.numel() / (a->kernel[0] * a->kernel[1]);
    Tensor trimmed({w.dim(0), w.dim(1), t[0].count, t[1].count});
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < t[0].count; ++i)
        std::memcpy(trimmed.f32() + (p * t[0].count + i) * t[1].count,
                    w.f32() + (p * a->kernel[0] + t[0].first + i) * a->kernel[1] + t[1].first,
                    static_cast<size_t>(t[1].count) * sizeof(float));
    r.changes.push_back(fmt::format("{} '{}': kernel {}x{} pad {},{} -> {}x{} pad {},{} (the other taps read only padding)",
                                    node.type, node.name, a->kernel[0], a->kernel[1], a->pad[0], a->pad[1], t[0].count,
                                    t[1].count, t[0].pad, t[1].pad));
    w = std::move(trimmed);
    a->kernel = {t[0].count, t[1].count};
    a->pad = {t[0].pad, t[1].pad};
  }
  return r;
}

}  // namespace bks
