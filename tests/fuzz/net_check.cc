#include "net_check.h"

#include "data/dataset.h"
#include "fuzz_util.h"
#include "ops/shape_inference.h"
#include "runtime/param_binding.h"

namespace bks::fuzz {
namespace {

std::string idx_file(uint8_t ndims, const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::string b{0, 0, 8, static_cast<char>(ndims)};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((d >> s) & 0xff));
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<char>(i * 37 % 251));
  return b;
}

bool local_path(const std::string& p) { return !p.empty() && p[0] != '/' && p.find("..") == std::string::npos; }

}  // namespace

void write_data_fixtures() {
  static const bool done = [] {
    // Two 1x4x4 images with their labels, as "source: \"images-idx3-ubyte\"" reads them.
    write_scratch("images-idx3-ubyte", idx_file(3, {2, 4, 4}, 32));
    write_scratch("labels-idx1-ubyte", idx_file(1, {2}, 2));
    DatasetField data{"data", {1, 4, 4}, DType::f32, std::vector<uint8_t>(2 * 16 * sizeof(float))};
    DatasetField label{"label", {}, DType::f32, std::vector<uint8_t>(2 * sizeof(float))};
    write_hdf5(scratch_dir() + "/data.h5", {data, label}, 2);
    write_scratch("h5list.txt", scratch_dir() + "/data.h5\n");
    return true;
  }();
  (void)done;
}

bool sources_stay_local(const proto::NetParameter& net) {
  for (const auto& l : net.layer()) {
    if (l.has_data_param() && l.data_param().has_source() && !local_path(l.data_param().source())) return false;
    if (l.has_hdf5_data_param() && l.hdf5_data_param().has_source() && !local_path(l.hdf5_data_param().source()))
      return false;
    if (l.has_transform_param() && l.transform_param().has_mean_file() && !local_path(l.transform_param().mean_file()))
      return false;
  }
  return true;
}

void check_graph(Graph& g, Phase phase) {
  infer_shapes(g, phase);
  ParamDecls decls = declared_params(g, phase);
  for (size_t n = 0; n < g.nodes.size(); ++n) decls(static_cast<int>(n));
}

void check_net_phases(const NetLoad& net) {
  for (Phase phase : {proto::TRAIN, proto::TEST}) {
    proto::NetState state = net.param.state();
    state.set_phase(phase);
    Graph g = build_caffe_graph(net, state);
    check_graph(g, phase);
  }
}

}  // namespace bks::fuzz
