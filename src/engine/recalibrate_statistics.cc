#include "engine/recalibrate_statistics.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "formats/caffe_net.h"
#include "formats/weights.h"
#include "ops/op_def.h"
#include "runtime/net.h"

namespace bks {

int recalibrate_statistics(const proto::NetParameter& net, const std::string& source,
                           std::map<std::string, Tensor>& weights, int batches, int threads) {
  if (batches < 1) input_error("--recalibrate must be at least 1 batch, got {}", batches);
  NetLoad nl;
  nl.param = net;
  nl.source = source;
  const proto::NetState st = net_state(nl, proto::TRAIN, {});
  Graph g = build_caffe_graph(nl, st);
  if (std::none_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return op_traits(n).data_layer; }))
    input_error("{}: --recalibrate reads the TRAIN phase's data, and that phase has no data layer", source);
  CpuBackend backend(threads);
  ParamStore store;
  Net n(std::move(g), proto::TRAIN, store, backend, 1);
  load_weights(weights, store, source);
  int count = 0;
  for (Param& p : store.all())
    if (!p.learnable) {
      p.data.zero();
      ++count;
    }
  if (count == 0) return 0;
  for (int b = 0; b < batches; ++b) {
    n.forward(b);
    if ((b + 1) % 10 == 0 || b + 1 == batches) log::info("recalibrating statistics: batch {}/{}", b + 1, batches);
  }
  for (const Param& p : store.all())
    if (!p.learnable && weights.count(p.key)) weights[p.key] = p.data.clone();
  return count;
}

}  // namespace bks
