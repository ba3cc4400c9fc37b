#include "engine/compress_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "backend/dnnl_util.h"
#include "core/error.h"
#include "formats/weight_coding.h"
#include "ops/op_def.h"

namespace bks {

namespace {

// The grid each layer's weights (blob 0) are stored on: an INT8 layer's is the one its
// kernel rounds them to; with `weight_bits` every layer's has at most 2^(bits-1) - 1 levels.
std::map<std::string, ChannelGrid> weight_grids(const Graph& g, int weight_bits) {
  const int cap = weight_bits > 0 ? (1 << (weight_bits - 1)) - 1 : 0;
  std::map<std::string, ChannelGrid> grids;
  for (const Node& n : g.nodes) {
    const bool int8 = n.deploy.int8_input_threshold > 0.f;
    if (!op_traits(n).weighted_linear || (!int8 && cap == 0)) continue;
    const OpDef* def = OpDefRegistry::get().find(n.type);
    if (!def) continue;
    ChannelGrid grid;
    grid.channels = def->output_channels(n);
    grid.channel_last = def->weights_output_last(n);
    grid.levels = int8 ? static_cast<int>(int8_weight_levels()) : cap;
    if (cap > 0) grid.levels = std::min(grid.levels, cap);
    grids[n.name + ".0"] = grid;
  }
  return grids;
}

}  // namespace

std::vector<CodedTensorReport> compress_weights(Bundle& b, int weight_bits) {
  BKS_CHECK(weight_bits == 0 || (weight_bits >= 2 && weight_bits <= 8), "weight bits outside [2, 8]");
  const std::map<std::string, ChannelGrid> grids = weight_grids(b.graph, weight_bits);
  std::vector<CodedTensorReport> rows;
  b.coded.clear();
  for (auto& [name, t] : b.weights) {
    auto grid = grids.find(name);
    CodedWeights c = encode_weights(t, grid == grids.end() ? nullptr : &grid->second);
    Tensor bytes({static_cast<int64_t>(c.bytes.size())}, DType::u8);
    std::copy(c.bytes.begin(), c.bytes.end(), bytes.data<char>());
    rows.push_back({name, c.layout, t.numel(), c.stored, t.bytes(), c.bytes.size()});
    t = decode_weights(c.bytes, t.shape(), t.dtype(), name);
    b.coded[name] = bytes;
  }
  std::sort(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.coded_bytes > y.coded_bytes; });
  return rows;
}

std::string coding_summary(const std::vector<CodedTensorReport>& rows) {
  size_t dense = 0, coded = 0;
  for (const auto& r : rows) dense += r.dense_bytes, coded += r.coded_bytes;
  return fmt::format("{:.3f} MB of weights stored in {:.3f} MB ({:.1f}x smaller)", dense / 1e6, coded / 1e6,
                     coded ? static_cast<double>(dense) / coded : 0.0);
}

}  // namespace bks
