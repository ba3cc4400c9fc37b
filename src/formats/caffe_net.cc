#include "formats/caffe_net.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "formats/caffe_upgrade.h"
#include "formats/onnx_import.h"
#include "formats/prototxt.h"
#include "formats/unique_names.h"

namespace bks {
namespace {

bool rule_met(const proto::NetStateRule& rule, const proto::NetState& state) {
  if (rule.has_phase() && rule.phase() != state.phase()) return false;
  if (rule.has_min_level() && state.level() < rule.min_level()) return false;
  if (rule.has_max_level() && state.level() > rule.max_level()) return false;
  auto has_stage = [&](const std::string& s) {
    return std::find(state.stage().begin(), state.stage().end(), s) != state.stage().end();
  };
  for (auto& s : rule.stage())
    if (!has_stage(s)) return false;
  for (auto& s : rule.not_stage())
    if (has_stage(s)) return false;
  return true;
}

// Caffe's deprecated net-level `input:` fields become an Input layer.
void add_net_level_inputs(const NetLoad& net, Graph& g, std::map<std::string, int>& latest) {
  const auto& p = net.param;
  if (p.input_size() == 0) {
    if (p.input_shape_size() || p.input_dim_size())
      input_error("{}: input_shape/input_dim given without 'input' names", net.source);
    return;
  }
  proto::LayerParameter lp;
  lp.set_name("input");
  lp.set_type("Input");
  auto* ip = lp.mutable_input_param();
  if (p.input_shape_size() > 0) {
    if (p.input_shape_size() != p.input_size())
      input_error("{}: {} 'input' names but {} 'input_shape' entries", net.source, p.input_size(),
                  p.input_shape_size());
    for (auto& s : p.input_shape()) *ip->add_shape() = s;
  } else {
    if (p.input_dim_size() != 4 * p.input_size())
      input_error("{}: 'input_dim' needs 4 values per input ({} inputs, {} values)", net.source, p.input_size(),
                  p.input_dim_size());
    for (int i = 0; i < p.input_size(); ++i) {
      auto* s = ip->add_shape();
      for (int k = 0; k < 4; ++k) s->add_dim(p.input_dim(4 * i + k));
    }
  }
  for (auto& name : p.input()) lp.add_top(name);
  Node n = caffe_layer_node(lp, net.source);
  int id = static_cast<int>(g.nodes.size());
  for (auto& name : p.input()) {
    int v = g.add_value(name);
    g.values[v].producer = id;
    n.outputs.push_back(v);
    latest[name] = v;
  }
  g.nodes.push_back(std::move(n));
}

}  // namespace

bool caffe_data_layer_type(const std::string& type) {
  static const std::set<std::string> kinds{"Data",      "HDF5Data",   "ImageData",      "Input",   "MemoryData",
                                           "DummyData", "WindowData", "DenseImageData", "TextData"};
  return kinds.count(type) > 0;
}

bool caffe_loss_layer_type(const std::string& type) {
  static const std::set<std::string> kinds{"ContrastiveLoss",         "EuclideanLoss",
                                           "HingeLoss",               "InfogainLoss",
                                           "MultinomialLogisticLoss", "SigmoidCrossEntropyLoss",
                                           "SoftmaxWithLoss"};
  return kinds.count(type) > 0;
}

bool layer_included(const proto::LayerParameter& layer, const proto::NetState& state) {
  if (layer.include_size() > 0) {
    return std::any_of(layer.include().begin(), layer.include().end(),
                       [&](const auto& r) { return rule_met(r, state); });
  }
  return std::none_of(layer.exclude().begin(), layer.exclude().end(),
                      [&](const auto& r) { return rule_met(r, state); });
}

proto::NetState net_state(const NetLoad& net, Phase phase, const StateFlags& flags) {
  proto::NetState st = net.param.state();
  st.set_phase(phase);
  for (const std::string& s : flags.stages) st.add_stage(s);
  if (flags.level >= 0) st.set_level(flags.level);
  return st;
}

namespace {
void upgrade_loaded(NetLoad& net) {
  if (NetFormat f = upgrade_net(net.param, net.source, &net.layer_lines); f != NetFormat::current)
    log::warn(
        "{}: the file is in Caffe's {} net format and was upgraded on load; `bakusoku upgrade_net_proto_text "
        "{} NEW.prototxt` writes it in the current format",
        net.source, net_format_name(f), net.source);
}
}  // namespace

NetLoad load_net_file(const std::string& path, const Shape& input_shape) {
  if (is_onnx_file(path)) return import_onnx(path, input_shape);
  NetLoad net;
  net.source = path;
  read_prototxt(path, net.param, &net.layer_lines);
  upgrade_loaded(net);
  resolve_data_paths(net.param, std::filesystem::path(path).parent_path().string());
  return net;
}

NetLoad parse_net_text(const std::string& text, const std::string& source) {
  NetLoad net;
  net.source = source;
  parse_prototxt_string(text, source, net.param, &net.layer_lines);
  upgrade_loaded(net);
  return net;
}

std::string resolve_path(const std::string& path, const std::string& base_dir) {
  namespace fs = std::filesystem;
  if (path.empty() || fs::path(path).is_absolute() || fs::exists(path)) return path;
  fs::path alt = fs::path(base_dir) / path;
  return fs::exists(alt) ? alt.string() : path;
}

void resolve_data_paths(proto::NetParameter& net, const std::string& dir) {
  for (auto& l : *net.mutable_layer()) {
    if (l.has_data_param() && l.data_param().has_source())
      l.mutable_data_param()->set_source(resolve_path(l.data_param().source(), dir));
    if (l.has_hdf5_data_param() && l.hdf5_data_param().has_source())
      l.mutable_hdf5_data_param()->set_source(resolve_path(l.hdf5_data_param().source(), dir));
    if (l.has_infogain_loss_param() && l.infogain_loss_param().has_source())
      l.mutable_infogain_loss_param()->set_source(resolve_path(l.infogain_loss_param().source(), dir));
    if (l.has_transform_param() && l.transform_param().has_mean_file())
      l.mutable_transform_param()->set_mean_file(resolve_path(l.transform_param().mean_file(), dir));
  }
}

Node caffe_layer_node(const proto::LayerParameter& lp, const std::string& where) {
  Node n;
  n.name = lp.name();
  n.type = lp.type();
  n.where = where;
  n.loss_weight.assign(lp.loss_weight().begin(), lp.loss_weight().end());
  for (const auto& s : lp.param())
    n.param_specs.push_back(ParamSpec{s.name(), s.lr_mult(), s.decay_mult(), s.has_lr_mult(), s.has_decay_mult()});
  n.attrs = attrs_from_caffe(lp, fmt::format("{}: layer '{}' ({})", where, n.name, n.type));
  return n;
}

proto::LayerParameter caffe_layer(const Graph& g, int node) {
  const Node& n = g.nodes.at(node);
  proto::LayerParameter l;
  if (const AttrsKind* kind = find_attrs(n.type); kind && n.attrs) kind->to_caffe(*n.attrs.get(), l);
  l.set_name(n.name);
  l.set_type(n.type);
  for (int v : n.inputs) l.add_bottom(g.values[v].name);
  for (int v : n.outputs) l.add_top(g.values[v].name);
  for (float w : n.loss_weight) l.add_loss_weight(w);
  for (const ParamSpec& s : n.param_specs) {
    proto::ParamSpec* p = l.add_param();
    if (!s.share_name.empty()) p->set_name(s.share_name);
    if (s.lr_mult != 1.f) p->set_lr_mult(s.lr_mult);
    if (s.decay_mult != 1.f) p->set_decay_mult(s.decay_mult);
  }
  return l;
}

proto::LayerParameter caffe_accuracy_layer(const std::string& name, int top_k) {
  proto::LayerParameter l;
  l.set_name(name);
  l.set_type("Accuracy");
  l.mutable_accuracy_param()->set_top_k(static_cast<uint32_t>(top_k));
  return l;
}

Graph build_caffe_graph(const NetLoad& net, const proto::NetState& state) {
  Graph g;
  g.name = net.param.name();
  g.source = net.source;
  std::map<std::string, int> latest;  // blob name -> current value
  std::set<std::string> blob_names;
  UniqueNames layer_names;
  int renamed = 0;
  add_net_level_inputs(net, g, latest);
  for (const auto& lp : net.param.layer()) blob_names.insert(lp.top().begin(), lp.top().end());

  for (int li = 0; li < net.param.layer_size(); ++li) {
    const auto& lp = net.param.layer(li);
    std::string where =
        fmt::format("{}:{}", net.source, li < static_cast<int>(net.layer_lines.size()) ? net.layer_lines[li] : 0);
    if (lp.include_size() > 0 && lp.exclude_size() > 0)
      input_error("{}: layer '{}' gives both include and exclude rules; Caffe takes one or the other", where,
                  lp.name());
    if (!layer_included(lp, state)) continue;
    if (lp.type().empty()) input_error("{}: layer '{}' has no 'type'", where, lp.name());
    Node n = caffe_layer_node(lp, where);
    if (lp.name().empty()) n.name = fmt::format("{}_{}", lp.type(), li);
    // Caffe accepts a name used twice (BVLC's mnist_autoencoder has two 'loss' layers); here
    // names key the weights, so the later layer gets a name of its own, and says so.
    if (const std::string unique = layer_names.take(n.name); unique != n.name) {
      if (++renamed <= 5)
        log::warn("{}: layer name '{}' is used twice; the later layer is called '{}' here (its weights too)", where,
                  n.name, unique);
      else if (renamed == 6)
        log::warn("{}: more layer names are used twice; those layers are renamed the same way", where);
      n.name = unique;
    }
    int id = static_cast<int>(g.nodes.size());
    for (auto& b : lp.bottom()) {
      auto it = latest.find(b);
      if (it == latest.end())
        input_error("{}: layer '{}' ({}): bottom '{}' is not produced by any earlier layer in this phase", where,
                    n.name, n.type, b);
      n.inputs.push_back(it->second);
      g.values[it->second].consumers.push_back(id);
    }
    for (auto& t : lp.top()) {
      bool in_place = std::find(lp.bottom().begin(), lp.bottom().end(), t) != lp.bottom().end();
      if (!in_place && latest.count(t))
        input_error("{}: layer '{}' ({}): top '{}' is already produced by another layer", where, n.name, n.type, t);
      int v = g.add_value(t);
      g.values[v].producer = id;
      n.outputs.push_back(v);
      latest[t] = v;
    }
    // Caffe's AutoTopBlobs: a loss layer without a top gets one no other layer can read (BVLC's
    // pascal_finetune_trainval_test has such a loss). Named after the layer, so its value is
    // reported by that name, unless a blob has that name already.
    if (lp.top_size() == 0 && caffe_loss_layer_type(n.type)) {
      std::string name = blob_names.count(n.name) ? n.name + " (automatic)" : n.name;
      int v = g.add_value(name);
      g.values[v].producer = id;
      n.outputs.push_back(v);
    }
    if (lp.propagate_down_size() > 0 && lp.propagate_down_size() != lp.bottom_size())
      input_error("{}: layer '{}': propagate_down has {} entries for {} bottoms", where, n.name,
                  lp.propagate_down_size(), lp.bottom_size());
    for (int i = 0; i < lp.bottom_size(); ++i)
      n.propagate_down.push_back(lp.propagate_down_size() ? lp.propagate_down(i) : true);
    if (lp.loss_weight_size() > 0 && lp.loss_weight_size() != static_cast<int>(n.outputs.size()))
      input_error("{}: layer '{}': loss_weight has {} entries for {} tops", where, n.name, lp.loss_weight_size(),
                  n.outputs.size());
    g.nodes.push_back(std::move(n));
  }
  if (g.nodes.empty()) input_error("{}: no layers in phase {}", net.source, proto::Phase_Name(state.phase()));
  return g;
}

}  // namespace bks
