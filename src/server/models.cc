#include "server/models.h"

#include <google/protobuf/text_format.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "ops/op_def.h"
#include "ops/shape_inference.h"
#include "runtime/param_binding.h"
#include "server/api_error.h"
#include "server/source_error.h"

namespace bks::server {

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Streams of a text dataset's validation net: as many as its held-out text feeds with
// kTextSeqLen characters each and the one after (0: too little text to validate).
int64_t text_test_streams(const DatasetView& d, int64_t batch) {
  return std::min(batch, std::max<int64_t>(0, (d.val_count - 1) / kTextSeqLen));
}

// TextData layers reading a text dataset: tops chars, cont, next (see text_data.cc).
std::string text_data_layers(const DatasetView& d, int64_t batch) {
  // The holdout the dataset was packed with (info.json), so both sides hold out the same text.
  const std::string common = fmt::format("source: \"{}/text.txt\" seq_len: {} holdout: {:.6g} vocabulary_size: {}",
                                         d.dir, kTextSeqLen, std::max(0.0, d.holdout), d.classes);
  std::string s = fmt::format(
      R"(layer {{ name: "text" type: "TextData" top: "chars" top: "cont" top: "next" include {{ phase: TRAIN }}
  text_data_param {{ {} batch_size: {} }} }}
)",
      common, batch);
  if (const int64_t streams = text_test_streams(d, batch); streams > 0)
    s += fmt::format(
        R"(layer {{ name: "text" type: "TextData" top: "chars" top: "cont" top: "next" include {{ phase: TEST }}
  text_data_param {{ {} batch_size: {} read_holdout: true }} }}
)",
        common, streams);
  return s;
}

// The data layers reading a packed dataset: Data layers (pixels scaled to [0, 1)) for
// images, TextData for text.
std::string data_layers(const DatasetView& d, int64_t batch) {
  if (d.text) return text_data_layers(d, batch);
  std::string s = fmt::format(R"(layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TRAIN }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{}/train.h5" batch_size: {} }} }}
)",
                              d.dir, batch);
  if (d.val_count > 0)
    s += fmt::format(R"(layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TEST }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{}/val.h5" batch_size: {} }} }}
)",
                     d.dir, std::min<int64_t>(100, d.val_count));
  return s;
}

const char* kLossLayers =
    R"(layer { name: "accuracy" type: "Accuracy" bottom: "@TOP@" bottom: "label" top: "accuracy" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "@TOP@" bottom: "label" top: "loss" }
)";

const char* kLeNet =
    R"(layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 20 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 50 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1" param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: @CLASSES@ weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
)";

const char* kCifarQuick =
    R"(layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 32 pad: 2 kernel_size: 5 weight_filler { type: "gaussian" std: 0.0001 } bias_filler { type: "constant" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 32 pad: 2 kernel_size: 5 weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "conv3" type: "Convolution" bottom: "pool2" top: "conv3" param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 64 pad: 2 kernel_size: 5 weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" } } }
layer { name: "relu3" type: "ReLU" bottom: "conv3" top: "conv3" }
layer { name: "pool3" type: "Pooling" bottom: "conv3" top: "pool3" pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool3" top: "ip1" param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: @CLASSES@ weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "constant" } } }
)";

// A character-level language model as examples/char_rnn trains one: an embedding, two LSTM
// layers carrying their state from batch to batch, and a classifier over the vocabulary.
const char* kCharRnn =
    R"(layer { name: "embed" type: "Embed" bottom: "chars" top: "embedded"
  embed_param { num_output: 64 input_dim: @CLASSES@ bias_term: false weight_filler { type: "uniform" min: -0.08 max: 0.08 } } }
layer { name: "lstm1" type: "LSTM" bottom: "embedded" bottom: "cont" top: "h1"
  recurrent_param { num_output: 256 weight_filler { type: "uniform" min: -0.08 max: 0.08 } bias_filler { type: "constant" } } }
layer { name: "lstm2" type: "LSTM" bottom: "h1" bottom: "cont" top: "h2"
  recurrent_param { num_output: 256 weight_filler { type: "uniform" min: -0.08 max: 0.08 } bias_filler { type: "constant" } } }
layer { name: "logits" type: "InnerProduct" bottom: "h2" top: "logits"
  inner_product_param { num_output: @CLASSES@ axis: 2 weight_filler { type: "uniform" min: -0.08 max: 0.08 } bias_filler { type: "constant" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "logits" bottom: "next" top: "loss" softmax_param { axis: 2 } }
)";

// conv + BatchNorm + Scale (+ ReLU), named `name`, reading `bottom`.
std::string conv_bn(const std::string& name, const std::string& bottom, int out, int k, int stride, bool relu) {
  std::string s = fmt::format(
      R"(layer {{ name: "{0}" type: "Convolution" bottom: "{1}" top: "{0}" convolution_param {{ num_output: {2} kernel_size: {3} stride: {4} pad: {5} bias_term: false weight_filler {{ type: "msra" }} }} }}
layer {{ name: "{0}_bn" type: "BatchNorm" bottom: "{0}" top: "{0}" }}
layer {{ name: "{0}_scale" type: "Scale" bottom: "{0}" top: "{0}" scale_param {{ bias_term: true }} }}
)",
      name, bottom, out, k, stride, k / 2);
  if (relu) s += fmt::format("layer {{ name: \"{0}_relu\" type: \"ReLU\" bottom: \"{0}\" top: \"{0}\" }}\n", name);
  return s;
}

// A small ResNet: a 3x3 stem and three stages (16, 32, 64 channels) of one basic block
// each, the last two halving the resolution with a 1x1 projection shortcut.
std::string small_resnet() {
  std::string s = conv_bn("stem", "data", 16, 3, 1, true);
  std::string in = "stem";
  int width = 16;
  for (int stage = 0; stage < 3; ++stage) {
    int out = 16 << stage, stride = stage == 0 ? 1 : 2;
    std::string b = fmt::format("res{}", stage + 1);
    s += conv_bn(b + "_a", in, out, 3, stride, true);
    s += conv_bn(b + "_b", b + "_a", out, 3, 1, false);
    std::string shortcut = in;
    if (stride != 1 || out != width) {
      s += conv_bn(b + "_proj", in, out, 1, stride, false);
      shortcut = b + "_proj";
    }
    s += fmt::format(R"(layer {{ name: "{0}" type: "Eltwise" bottom: "{0}_b" bottom: "{1}" top: "{0}" }}
layer {{ name: "{0}_relu" type: "ReLU" bottom: "{0}" top: "{0}" }}
)",
                     b, shortcut);
    in = b;
    width = out;
  }
  s += fmt::format(
      R"(layer {{ name: "pool" type: "Pooling" bottom: "{}" top: "pool" pooling_param {{ pool: AVE global_pooling: true }} }}
layer {{ name: "fc" type: "InnerProduct" bottom: "pool" top: "fc" inner_product_param {{ num_output: @CLASSES@ weight_filler {{ type: "msra" }} bias_filler {{ type: "constant" }} }} }}
)",
      in);
  return s;
}

bool is_data_layer(const std::string& type) {
  proto::LayerParameter l;
  l.set_type(type);
  OpTraits t = op_traits(l);
  return t.data_layer || t.external_input || caffe_data_layer_type(type);
}

// What the parser and builder call the custom text (source_error.h takes it out again).
const char* const kCustomSource = "custom.prototxt";

// The user's layers (data layers dropped) after `head`, keeping each layer's source line.
NetLoad with_own_data(const std::string& text, const std::string& head) {
  NetLoad user = parse_net_text(text, kCustomSource), own = parse_net_text(head, "data layers"), out;
  out.source = kCustomSource;
  out.param = user.param;
  out.param.clear_layer();
  out.param.clear_input();
  out.param.clear_input_shape();
  out.param.clear_input_dim();
  for (const auto& l : own.param.layer()) {
    *out.param.add_layer() = l;
    out.layer_lines.push_back(0);
  }
  for (int i = 0; i < user.param.layer_size(); ++i) {
    if (is_data_layer(user.param.layer(i).type())) continue;
    *out.param.add_layer() = user.param.layer(i);
    out.layer_lines.push_back(i < static_cast<int>(user.layer_lines.size()) ? user.layer_lines[i] : 0);
  }
  return out;
}

// What a network may cost on this server. Validation and model creation check it from
// shape inference alone, before anything is allocated, so a model too large for the machine
// is refused naming the layer instead of taking gigabytes (and a training child that the
// out-of-memory killer ends later).
//  - Parameters: at most 2^28 floats in all (1 GiB of float32; training keeps three or four
//    copies: weights, gradients, solver history).
//  - Activations: at most 2^26 floats (256 MiB) per image summed over the net's blobs, at
//    the batch size of its data layer.
constexpr int64_t kMaxParameterFloats = int64_t{1} << 28;
constexpr int64_t kMaxActivationFloatsPerImage = int64_t{1} << 26;

std::string gib(int64_t floats) { return fmt::format("{:.2f} GiB", static_cast<double>(floats) * 4 / (1 << 30)); }

// Binds the net's parameter blobs as training would (resolve_parameters: 'param' specs,
// sharing, shapes) into a table of shapes instead of allocated blobs, and holds the
// parameter budget (shared blobs count once).
class BudgetSink : public ParamSink {
 public:
  BudgetSink(const Graph& g, std::string field) : g_(g), field_(std::move(field)) {}
  int find_shared(const std::string& share_name) const override { return index(by_share_, share_name); }
  int find_key(const std::string& key) const override { return index(by_key_, key); }
  const Shape& shape(int blob) const override { return shapes_[blob]; }
  const std::string& key(int blob) const override { return keys_[blob]; }
  int add(int node, const ParamRef& ref, const ParamDecl& decl) override {
    total_ += shape_numel(decl.shape);  // each below 2^62: shape inference checked it
    if (total_ > kMaxParameterFloats)
      throw ApiError(413, field_,
                     fmt::format("{}: the network's parameters reach {} floats ({}) here, over the server's limit "
                                 "of 2^28 floats (1 GiB)",
                                 g_.describe(node), total_, gib(total_)));
    const int idx = static_cast<int>(shapes_.size());
    shapes_.push_back(decl.shape);
    keys_.push_back(ref.key);
    by_key_[ref.key] = idx;
    if (!ref.share_name.empty()) by_share_[ref.share_name] = idx;
    return idx;
  }

 private:
  static int index(const std::map<std::string, int>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? -1 : it->second;
  }
  const Graph& g_;
  std::string field_;
  std::vector<Shape> shapes_;
  std::vector<std::string> keys_;
  std::map<std::string, int> by_key_, by_share_;
  int64_t total_ = 0;
};

void check_parameters(Graph& g, Phase phase, const std::string& field) {
  BudgetSink sink(g, field);
  resolve_parameters(g, declared_params(g, phase), sink);
}

// The activation budget: every blob the net computes (an in-place layer's output counts
// with its input), per image of the batch the data layer reads.
void check_activations(const Graph& g, const std::string& field) {
  const int data = g.find_value("data");
  const Shape& data_shape = data >= 0 ? g.values[data].shape : Shape{};
  const int64_t batch = data_shape.empty() ? 1 : std::max<int64_t>(1, data_shape[0]);
  std::map<std::string, int64_t> blobs;
  int64_t total = 0;
  for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
    for (int v : g.nodes[n].outputs) {
      const int64_t size = shape_numel(g.values[v].shape);
      int64_t& seen = blobs[g.values[v].name];
      if (size <= seen) continue;
      total += size - seen;
      seen = size;
      if (total / batch > kMaxActivationFloatsPerImage)
        throw ApiError(413, field,
                       fmt::format("{}: the network's blobs reach {} floats ({}) per image here, over the server's "
                                   "limit of 2^26 floats (256 MiB) per image",
                                   g.describe(n), total / batch, gib(total / batch)));
    }
}

// Checks the net in both phases (every layer's attributes, shapes and parameter blobs, and
// the size budget above) to find what is wrong, without building kernels or weights.
void build_both_phases(const NetLoad& nl, const std::string& field) {
  for (auto phase : {proto::TRAIN, proto::TEST}) {
    proto::NetState st;
    st.set_phase(phase);
    Graph g = build_caffe_graph(nl, st);
    infer_shapes(g, phase);
    check_parameters(g, phase, field);
    check_activations(g, field);
  }
}

// `e` with "line N: " for the custom text's "custom.prototxt:N:C: " (ApiError's message
// is one line for the form, which shows no file name).
ApiError in_lines(const ApiError& e) {
  return ApiError(e.status, e.field, with_line(split_source_error(e.what(), kCustomSource)));
}

}  // namespace

void check_builds(const std::string& text, const std::string& field) {
  try {
    NetLoad nl = parse_net_text(text, "network.prototxt");
    build_both_phases(nl, field);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw ApiError(400, field, e.what());
  }
}

std::string standard_layers(const std::string& name, const DatasetView& d) {
  const bool for_text = name == "char_rnn";
  if (for_text != d.text && (for_text || name == "lenet" || name == "cifar10_quick" || name == "resnet"))
    throw ApiError(400, "network",
                   for_text ? "'network' char_rnn reads text: pick a text dataset"
                            : fmt::format("'network' {} reads images; a text dataset takes char_rnn or custom", name));
  if (for_text) return replace_all(kCharRnn, "@CLASSES@", std::to_string(d.classes));
  std::string body;
  if (name == "lenet")
    body = kLeNet;
  else if (name == "cifar10_quick")
    body = kCifarQuick;
  else if (name == "resnet")
    body = small_resnet();
  else
    throw ApiError(400, "network", "'network' must be lenet, cifar10_quick, resnet, char_rnn or custom");
  std::string top = name == "resnet" ? "fc" : "ip2";
  return replace_all(body + replace_all(kLossLayers, "@TOP@", top), "@CLASSES@", std::to_string(d.classes));
}

std::string standard_network(const std::string& name, const DatasetView& d, int64_t batch) {
  std::string layers = standard_layers(name, d);  // checks the name first
  return fmt::format("name: \"{}\"\n", name) + data_layers(d, batch) + layers;
}

std::string custom_network(const std::string& text, const DatasetView& d, int64_t batch) {
  try {
    NetLoad nl = with_own_data(text, data_layers(d, batch));
    build_both_phases(nl, "prototxt");
    std::string out;
    google::protobuf::TextFormat::PrintToString(nl.param, &out);
    return out;
  } catch (const ApiError& e) {
    throw in_lines(e);
  } catch (const std::exception& e) {
    throw in_lines(ApiError(400, "prototxt", e.what()));
  }
}

namespace {

// `text`'s layers after the data layers `head`, built in both phases.
Validation validate_after(const std::string& text, const std::string& head) {
  Validation v;
  try {
    NetLoad nl = with_own_data(text, head);
    build_both_phases(nl, "prototxt");
  } catch (const ApiError& e) {
    throw in_lines(e);  // over the size budget: the request fails (413), it is not a verdict on the text
  } catch (const std::exception& e) {
    const SourceError where = split_source_error(e.what(), kCustomSource);
    v.ok = false;
    v.error = where.message;
    v.line = where.line;
    v.column = where.column;
  }
  return v;
}

}  // namespace

Validation validate_prototxt(const std::string& text, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t x : shape) dims += fmt::format(" dim: {}", x);
  return validate_after(
      text, fmt::format("layer {{ name: \"data\" type: \"Input\" top: \"data\" top: \"label\" input_param {{ shape "
                        "{{ dim: 2{} }} shape {{ dim: 2 }} }} }}\n",
                        dims));
}

Validation validate_prototxt(const std::string& text, const DatasetView& d) {
  return d.text ? validate_after(text, data_layers(d, 2)) : validate_prototxt(text, d.shape);
}

json validate_solver(const json& body) {
  json s;
  static const std::set<std::string> types{"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"};
  static const std::set<std::string> policies{"fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid"};
  std::string type = string_field(body, "type", false, 20);
  if (type.empty()) type = "SGD";
  if (!types.count(type))
    throw ApiError(400, "type", "'type' must be one of SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam");
  s["type"] = type;
  s["base_lr"] = number_list_field(body, "base_lr", 1e-8, 10, 0.01);
  s["batch_size"] = number_list_field(body, "batch_size", 1, 4096, 64);
  for (double b : s["batch_size"].get<std::vector<double>>())
    if (b != std::floor(b)) throw ApiError(400, "batch_size", "'batch_size' values must be integers");
  std::string policy = string_field(body, "lr_policy", false, 20);
  if (policy.empty()) policy = "fixed";
  if (!policies.count(policy))
    throw ApiError(400, "lr_policy", "'lr_policy' must be fixed, step, exp, inv, multistep, poly or sigmoid");
  s["lr_policy"] = policy;
  s["gamma"] = number_field(body, "gamma", 0, 10, 0.1);
  s["power"] = number_field(body, "power", 0, 10, 0.75);
  s["step_epochs"] = integer_field(body, "step_epochs", 1, 10000, 1);
  if (policy == "multistep") {  // Caffe's stepvalue, in epochs
    if (!body.contains("stepvalue_epochs") || body["stepvalue_epochs"].is_null())
      throw ApiError(400, "stepvalue_epochs",
                     "lr_policy 'multistep' needs 'stepvalue_epochs' (the epochs where the rate drops)");
    const auto steps = number_list_field(body, "stepvalue_epochs", 0.01, 1000, 1, 32);
    for (size_t i = 1; i < steps.size(); ++i)
      if (steps[i] <= steps[i - 1]) throw ApiError(400, "stepvalue_epochs", "'stepvalue_epochs' must increase");
    s["stepvalue_epochs"] = steps;
  }
  s["momentum"] = number_field(body, "momentum", 0, 0.999, 0.9);
  s["weight_decay"] = number_field(body, "weight_decay", 0, 1, 0.0005);
  s["epochs"] = number_field(body, "epochs", 0.01, 1000, 1);
  // 0: one snapshot, at the end. Otherwise no more often than every 0.01 epoch (and 50
  // iterations, below): a snapshot per iteration filled disks.
  s["snapshot_epochs"] = number_field(body, "snapshot_epochs", 0, 1000, 1);
  if (s["snapshot_epochs"].get<double>() > 0 && s["snapshot_epochs"].get<double>() < 0.01)
    throw ApiError(400, "snapshot_epochs", "'snapshot_epochs' must be 0 (at the end only) or at least 0.01");
  // The dashboard keeps the newest few snapshots of a job (the CLI keeps all unless told).
  s["keep_snapshots"] = integer_field(body, "keep_snapshots", 0, 1000, 5);
  s["test_epochs"] = number_field(body, "test_epochs", 0.01, 1000, 1);
  if (body.contains("display") && !body["display"].is_null())
    s["display"] = integer_field(body, "display", 1, 1000000, 1);  // absent: about ten per epoch
  s["seed"] = integer_field(body, "seed", 0, INT32_MAX, 1);
  return s;
}

int64_t iterations_per_epoch(int64_t batch, const DatasetView& d) {
  // Text as TextData counts an epoch: each of `batch` streams reads kTextSeqLen characters a
  // batch, and needs the character after its last.
  if (d.text) return std::max<int64_t>(1, (d.train_count - 1) / batch / kTextSeqLen);
  return std::max<int64_t>(1, (d.train_count + batch - 1) / batch);
}

namespace {

// The solver prototxt for `ipe` iterations per epoch; with `test_iter` > 0, tests of that
// many batches once an epoch.
std::string solver_text_for(const json& s, double base_lr, int64_t ipe, int64_t test_iter) {
  const int64_t max_iter = std::max<int64_t>(1, static_cast<int64_t>(std::llround(s["epochs"].get<double>() * ipe)));
  const std::string policy = s["lr_policy"].get<std::string>();
  std::string t = fmt::format("net: \"net.prototxt\"\ntype: \"{}\"\nbase_lr: {}\nlr_policy: \"{}\"\n",
                              s["type"].get<std::string>(), base_lr, policy);
  t += fmt::format("gamma: {}\npower: {}\nstepsize: {}\n", s["gamma"].get<double>(), s["power"].get<double>(),
                   s["step_epochs"].get<int64_t>() * ipe);
  if (policy == "multistep") {
    int64_t last = -1;
    for (double e : s["stepvalue_epochs"].get<std::vector<double>>()) {
      const int64_t at = std::max<int64_t>(1, std::llround(e * ipe));
      if (at <= last)
        throw ApiError(
            400, "stepvalue_epochs",
            fmt::format("'stepvalue_epochs': two steps fall on iteration {} ({} iterations per epoch)", at, ipe));
      t += fmt::format("stepvalue: {}\n", at);
      last = at;
    }
  }
  // AdaGrad and RMSProp take no momentum (Caffe refuses it; RMSProp's decay is rms_decay).
  if (s["type"] != "AdaGrad" && s["type"] != "RMSProp") t += fmt::format("momentum: {}\n", s["momentum"].get<double>());
  const int64_t display =
      s.contains("display") ? s["display"].get<int64_t>() : std::max<int64_t>(1, std::min<int64_t>(ipe / 10, 100));
  t += fmt::format("weight_decay: {}\nmax_iter: {}\ndisplay: {}\nrandom_seed: {}\n", s["weight_decay"].get<double>(),
                   max_iter, display, s.value("seed", int64_t{1}));
  const double snap = s["snapshot_epochs"].get<double>();
  const int64_t min_interval = std::min<int64_t>(max_iter, 50);
  t += fmt::format("snapshot: {}\n",
                   snap > 0 ? std::max(min_interval, static_cast<int64_t>(std::llround(snap * ipe))) : max_iter);
  const int64_t test_interval = std::max<int64_t>(1, std::llround(s.value("test_epochs", 1.0) * ipe));
  if (test_iter > 0)
    t += fmt::format("test_iter: {}\ntest_interval: {}\n", test_iter, std::min(test_interval, max_iter));
  return t;
}

// Validation batches covering the held-out part once: images in batches of up to 100;
// text in batches of its validation streams, at most 100 batches.
int64_t test_iterations(const DatasetView& d, int64_t batch) {
  if (d.val_count <= 0) return 0;
  if (!d.text) {
    const int64_t test_batch = std::min<int64_t>(100, d.val_count);
    return (d.val_count + test_batch - 1) / test_batch;
  }
  const int64_t streams = text_test_streams(d, batch);
  if (streams == 0) return 0;
  return std::clamp<int64_t>((d.val_count - 1) / (streams * kTextSeqLen), 1, 100);
}

}  // namespace

std::string solver_text(const json& s, double base_lr, int64_t batch, const DatasetView& d) {
  return solver_text_for(s, base_lr, iterations_per_epoch(batch, d), test_iterations(d, batch));
}

proto::SolverParameter solver_parameter(const json& s, double base_lr, int64_t ipe) {
  proto::SolverParameter p;
  parse_prototxt_string(solver_text_for(s, base_lr, ipe, 0), "solver.prototxt", p);
  return p;
}

}  // namespace bks::server
