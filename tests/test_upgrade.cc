// Caffe's V1 and V0 net formats (and the old solver_type enum) upgraded on load as Caffe's
// upgrade_proto.cpp does: the upgraded NetParameter against the current-format file, the
// weights of a V1 .caffemodel against a current one, a fine-tune from it, the upgrade verbs
// and the errors for what Caffe refuses.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cli_util.h"
#include "core/error.h"
#include "core/file_io.h"
#include "formats/caffe_net.h"
#include "formats/caffe_upgrade.h"
#include "formats/prototxt.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "train/trainer.h"

namespace bks {
namespace {
namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;
using test::run_cmd;

std::string write_temp(const std::string& name, const std::string& bytes) {
  fs::path p = fs::temp_directory_path() / ("bks_upgrade_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

const std::string kTrainImages = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
const std::string kTestImages = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

// Caffe's LeNet as the original model zoo wrote it (V1: enum types, blobs_lr, the data
// layer's scale in data_param).
std::string v1_lenet() {
  return R"(name: "LeNet"
layers {
  name: "fashion"
  type: DATA
  top: "data"
  top: "label"
  data_param { source: ")" +
         kTrainImages + R"(" batch_size: 64 scale: 0.00390625 }
  include: { phase: TRAIN }
}
layers {
  name: "fashion"
  type: DATA
  top: "data"
  top: "label"
  data_param { source: ")" +
         kTestImages + R"(" batch_size: 100 scale: 0.00390625 }
  include: { phase: TEST }
}
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  convolution_param {
    num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layers {
  name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "conv2" type: CONVOLUTION bottom: "pool1" top: "conv2" blobs_lr: 1 blobs_lr: 2
  convolution_param {
    num_output: 50 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layers {
  name: "pool2" type: POOLING bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "ip1" type: INNER_PRODUCT bottom: "pool2" top: "ip1" blobs_lr: 1 blobs_lr: 2
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" }
layers {
  name: "ip2" type: INNER_PRODUCT bottom: "ip1" top: "ip2" blobs_lr: 1 blobs_lr: 2
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layers {
  name: "accuracy" type: ACCURACY bottom: "ip2" bottom: "label" top: "accuracy"
  include: { phase: TEST }
}
layers { name: "loss" type: SOFTMAX_LOSS bottom: "ip2" bottom: "label" top: "loss" }
)";
}

// The same net in the current format (examples/fashion_mnist/lenet_train_test.prototxt).
std::string current_lenet() {
  return R"(name: "LeNet"
layer {
  name: "fashion" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: ")" +
         kTrainImages + R"(" batch_size: 64 }
}
layer {
  name: "fashion" type: "Data" top: "data" top: "label"
  include { phase: TEST }
  transform_param { scale: 0.00390625 }
  data_param { source: ")" +
         kTestImages + R"(" batch_size: 100 }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param {
    num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer {
  name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param {
    num_output: 50 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer {
  name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer {
  name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer {
  name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST }
}
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
)";
}

proto::NetParameter parse_net(const std::string& text, std::vector<int>* lines = nullptr) {
  proto::NetParameter p;
  parse_prototxt_string(text, "net", p, lines);
  return p;
}

::testing::AssertionResult same_message(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  std::string diff;
  MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  if (d.Compare(a, b)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(Upgrade, V1LenetBecomesTheCurrentLenet) {
  std::vector<int> lines;
  proto::NetParameter v1 = parse_net(v1_lenet(), &lines);
  ASSERT_EQ(v1.layers_size(), 11);
  EXPECT_EQ(upgrade_net(v1, "net", &lines), NetFormat::v1);
  EXPECT_EQ(v1.layers_size(), 0);
  EXPECT_TRUE(same_message(v1, parse_net(current_lenet())));
  // The lines of the V1 entries stay with the upgraded layers (conv1 starts on line 18).
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[2], 18);

  // The same graph in each phase, down to the attributes the op sees.
  NetLoad a, b;
  a.param = v1;
  b.param = parse_net(current_lenet());
  for (Phase phase : {proto::TRAIN, proto::TEST}) {
    proto::NetState st;
    st.set_phase(phase);
    Graph ga = build_caffe_graph(a, st), gb = build_caffe_graph(b, st);
    ASSERT_EQ(ga.nodes.size(), gb.nodes.size());
    for (size_t i = 0; i < ga.nodes.size(); ++i)
      EXPECT_TRUE(same_message(caffe_layer(ga, static_cast<int>(i)), caffe_layer(gb, static_cast<int>(i))));
  }
  // A file already current is left alone.
  proto::NetParameter current = parse_net(current_lenet());
  EXPECT_EQ(upgrade_net(current, "net"), NetFormat::current);
  EXPECT_TRUE(same_message(current, parse_net(current_lenet())));
}

TEST(Upgrade, BlobsLrAndWeightDecayBecomeParamSpecs) {
  proto::NetParameter p = parse_net(R"(
    input: "x" input_dim: 1 input_dim: 4 input_dim: 1 input_dim: 1
    layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y"
             blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
             param: "shared_w" blob_share_mode: PERMISSIVE
             loss_weight: 0.5
             inner_product_param { num_output: 3 } })");
  upgrade_net(p, "net");
  ASSERT_EQ(p.layer_size(), 1);
  const proto::LayerParameter& l = p.layer(0);
  ASSERT_EQ(l.param_size(), 2);
  EXPECT_EQ(l.param(0).name(), "shared_w");
  EXPECT_EQ(l.param(0).share_mode(), proto::ParamSpec::PERMISSIVE);
  EXPECT_EQ(l.param(0).lr_mult(), 1.f);
  EXPECT_EQ(l.param(0).decay_mult(), 1.f);
  EXPECT_FALSE(l.param(1).has_name());
  EXPECT_EQ(l.param(1).lr_mult(), 2.f);
  EXPECT_TRUE(l.param(1).has_decay_mult());
  EXPECT_EQ(l.param(1).decay_mult(), 0.f);
  ASSERT_EQ(l.loss_weight_size(), 1);
  EXPECT_EQ(l.loss_weight(0), 0.5f);
  EXPECT_EQ(l.inner_product_param().num_output(), 3u);
  // The deprecated net-level input stays for the graph builder, which makes it an Input layer.
  EXPECT_EQ(p.input_size(), 1);
  NetLoad nl;
  nl.param = p;
  Graph g = build_caffe_graph(nl, proto::NetState());
  ASSERT_EQ(g.nodes.size(), 2u);
  ASSERT_EQ(g.nodes[1].param_specs.size(), 2u);
  EXPECT_EQ(g.nodes[1].param_specs[1].lr_mult, 2.f);
  EXPECT_EQ(g.nodes[1].param_specs[1].decay_mult, 0.f);
}

TEST(Upgrade, V1DataLayerTransformationMovesToTransformParam) {
  proto::NetParameter p = parse_net(R"(
    layers { name: "d" type: DATA top: "data" top: "label"
             data_param { source: "db" batch_size: 8 scale: 0.5 mean_file: "m.binaryproto" crop_size: 24
                          mirror: true } }
    layers { name: "r" type: RELU bottom: "data" top: "r" })");
  upgrade_net(p, "net");
  const proto::LayerParameter& d = p.layer(0);
  EXPECT_EQ(d.transform_param().scale(), 0.5f);
  EXPECT_EQ(d.transform_param().mean_file(), "m.binaryproto");
  EXPECT_EQ(d.transform_param().crop_size(), 24u);
  EXPECT_TRUE(d.transform_param().mirror());
  EXPECT_FALSE(d.data_param().has_scale() || d.data_param().has_mean_file() || d.data_param().has_crop_size() ||
               d.data_param().has_mirror());
  EXPECT_EQ(d.data_param().source(), "db");
  EXPECT_FALSE(p.layer(1).has_transform_param());
}

// R-CNN's V1 WINDOW_DATA: mean_file, crop_size and mirror move to transform_param as in
// Caffe, but the scale stays in window_data_param, where WindowData reads it. V0's
// window_data fields (det_*) become window_data_param's. V1 IMAGE_DATA moves all four.
TEST(Upgrade, V1AndV0WindowDataKeepTheirFields) {
  proto::NetParameter p = parse_net(R"(
    layers { name: "w" type: WINDOW_DATA top: "data" top: "label"
             window_data_param { source: "windows.txt" batch_size: 128 scale: 0.5 mean_file: "m.binaryproto"
                                 crop_size: 227 mirror: true fg_threshold: 0.5 context_pad: 16 crop_mode: "warp" } }
    layers { name: "i" type: IMAGE_DATA top: "i" top: "l"
             image_data_param { source: "list.txt" scale: 0.25 crop_size: 8 } })");
  upgrade_net(p, "net");
  const proto::LayerParameter& w = p.layer(0);
  EXPECT_EQ(w.type(), "WindowData");
  EXPECT_EQ(w.transform_param().mean_file(), "m.binaryproto");
  EXPECT_EQ(w.transform_param().crop_size(), 227u);
  EXPECT_TRUE(w.transform_param().mirror());
  EXPECT_FALSE(w.transform_param().has_scale());
  EXPECT_EQ(w.window_data_param().scale(), 0.5f);
  EXPECT_FALSE(w.window_data_param().has_mean_file() || w.window_data_param().has_crop_size() ||
               w.window_data_param().has_mirror());
  EXPECT_EQ(w.window_data_param().context_pad(), 16u);
  EXPECT_EQ(p.layer(1).transform_param().scale(), 0.25f);
  EXPECT_EQ(p.layer(1).transform_param().crop_size(), 8u);
  EXPECT_FALSE(p.layer(1).image_data_param().has_scale() || p.layer(1).image_data_param().has_crop_size());

  p = parse_net(R"(
    layers { layer { name: "w" type: "window_data" source: "windows.txt" batchsize: 64 scale: 2 cropsize: 99
                     meanfile: "m.binaryproto" det_fg_threshold: 0.6 det_bg_threshold: 0.3 det_fg_fraction: 0.5
                     det_context_pad: 8 det_crop_mode: "square" }
             top: "data" top: "label" })");
  EXPECT_EQ(upgrade_net(p, "net"), NetFormat::v0);
  const proto::WindowDataParameter& v = p.layer(0).window_data_param();
  EXPECT_EQ(v.source(), "windows.txt");
  EXPECT_EQ(v.batch_size(), 64u);
  EXPECT_EQ(v.scale(), 2.f);
  EXPECT_EQ(v.fg_threshold(), 0.6f);
  EXPECT_EQ(v.bg_threshold(), 0.3f);
  EXPECT_EQ(v.fg_fraction(), 0.5f);
  EXPECT_EQ(v.context_pad(), 8u);
  EXPECT_EQ(v.crop_mode(), "square");
  EXPECT_EQ(p.layer(0).transform_param().crop_size(), 99u);
  EXPECT_EQ(p.layer(0).transform_param().mean_file(), "m.binaryproto");
}

// V0: `layers { layer { ... } bottom top }`, flat fields, and padding as its own layer.
const char* kV0Net = R"(name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers {
  layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 1 biasterm: false
          weight_filler { type: "gaussian" std: 0.01 } blobs_lr: 1 weight_decay: 1 }
  bottom: "pad1" top: "conv1"
}
layers { layer { name: "relu1" type: "relu" } bottom: "conv1" top: "conv1" }
layers { layer { name: "pool1" type: "pool" pool: AVE kernelsize: 2 stride: 2 } bottom: "conv1" top: "pool1" }
layers { layer { name: "norm1" type: "lrn" local_size: 3 alpha: 0.0001 beta: 0.75 } bottom: "pool1" top: "norm1" }
layers { layer { name: "fc" type: "innerproduct" num_output: 10 } bottom: "norm1" top: "fc" }
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "fc" top: "fc" }
layers { layer { name: "prob" type: "softmax" } bottom: "fc" top: "prob" }
)";

TEST(Upgrade, V0PaddingFoldsIntoTheNextConvolution) {
  std::vector<int> lines;
  proto::NetParameter p = parse_net(kV0Net, &lines);
  EXPECT_EQ(upgrade_net(p, "net", &lines), NetFormat::v0);
  proto::NetParameter want = parse_net(R"(name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 decay_mult: 1 }
  convolution_param { num_output: 4 bias_term: false pad: 2 kernel_size: 3 stride: 1
                      weight_filler { type: "gaussian" std: 0.01 } }
}
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1" lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }
layer { name: "fc" type: "InnerProduct" bottom: "norm1" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" dropout_param { dropout_ratio: 0.3 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
)");
  EXPECT_TRUE(same_message(p, want));
  // The padding layer's line is gone; conv1's (line 5) leads.
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0], 5);
  NetLoad nl;
  nl.param = p;
  Graph g = build_caffe_graph(nl, proto::NetState());
  EXPECT_EQ(g.nodes.size(), 8u);  // the Input layer and seven
}

TEST(Upgrade, V0ErrorsNameTheLayer) {
  proto::NetParameter p = parse_net(R"(input: "data"
layers { layer { name: "pad1" type: "padding" pad: 1 } bottom: "data" top: "pad1" }
layers { layer { name: "fc" type: "innerproduct" num_output: 2 } bottom: "pad1" top: "fc" })");
  std::string e = error_of([&] { upgrade_net(p, "v0.prototxt"); });
  EXPECT_NE(e.find("layer 'fc'"), std::string::npos) << e;
  EXPECT_NE(e.find("'pad1'"), std::string::npos) << e;
  std::vector<int> lines;
  p = parse_net("input: 'data'\nlayers { layer { name: 'warp' type: 'warpdrive' } bottom: 'data' top: 'w' }", &lines);
  e = error_of([&] { upgrade_net(p, "v0.prototxt", &lines); });
  EXPECT_NE(e.find("v0.prototxt:2: layer 'warp': unknown V0 layer type 'warpdrive'"), std::string::npos) << e;
}

TEST(Upgrade, MixingLayerAndLayersIsRefused) {
  std::vector<int> lines;
  proto::NetParameter p = parse_net(
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 } } }\n"
      "layers { name: 'old_relu' type: RELU bottom: 'x' top: 'y' }\n",
      &lines);
  std::string e = error_of([&] { upgrade_net(p, "mixed.prototxt", &lines); });
  EXPECT_NE(e.find("mixed.prototxt:1: layer 'in'"), std::string::npos) << e;
  EXPECT_NE(e.find("'old_relu'"), std::string::npos) << e;
}

// As train reads a solver: the enum upgraded, and a V1 net written inside it too.
TEST(Upgrade, SolverFileWithInlineV1Net) {
  const std::string path = write_temp("inline_solver.prototxt",
                                      "solver_type: RMSPROP base_lr: 0.1\n"
                                      "net_param { layers { name: 'r' type: RELU bottom: 'x' top: 'y' } }\n"
                                      "test_net_param { layers { name: 't' type: TANH bottom: 'x' top: 'y' } }\n");
  proto::SolverParameter s;
  read_solver_file(path, s);
  EXPECT_EQ(s.type(), "RMSProp");
  ASSERT_EQ(s.net_param().layer_size(), 1);
  EXPECT_EQ(s.net_param().layers_size(), 0);
  EXPECT_EQ(s.net_param().layer(0).type(), "ReLU");
  ASSERT_EQ(s.test_net_param(0).layer_size(), 1);
  EXPECT_EQ(s.test_net_param(0).layer(0).type(), "TanH");
}

TEST(Upgrade, SolverTypeEnumBecomesType) {
  proto::SolverParameter s;
  parse_prototxt_string("base_lr: 0.1 solver_type: NESTEROV", "solver", s);
  EXPECT_TRUE(upgrade_solver(s, "solver"));
  EXPECT_EQ(s.type(), "Nesterov");
  EXPECT_FALSE(s.has_solver_type());
  EXPECT_FALSE(upgrade_solver(s, "solver"));
  proto::SolverParameter both;
  parse_prototxt_string("solver_type: ADAM type: 'Adam'", "solver", both);
  EXPECT_NE(error_of([&] { upgrade_solver(both, "s.prototxt"); }).find("s.prototxt: solver_type"), std::string::npos);
}

// --- weights ----------------------------------------------------------------------------

struct Blob {
  std::string layer;
  Shape shape;
  std::vector<float> values;
};

std::vector<Blob> lenet_blobs() {
  std::vector<Blob> blobs{{"conv1", {20, 1, 5, 5}, {}}, {"conv1", {20}, {}},     {"conv2", {50, 20, 5, 5}, {}},
                          {"conv2", {50}, {}},          {"ip1", {500, 800}, {}}, {"ip1", {500}, {}},
                          {"ip2", {10, 500}, {}},       {"ip2", {10}, {}}};
  int k = 0;
  for (Blob& b : blobs) {
    b.values.resize(static_cast<size_t>(shape_numel(b.shape)));
    for (float& v : b.values) v = 0.05f * static_cast<float>(std::sin(0.37 * ++k));
  }
  return blobs;
}

// Old BlobProto: num/channels/height/width, shorter shapes padded in front with ones.
void fill_legacy(proto::BlobProto& bp, const Blob& b) {
  Shape s = b.shape;
  while (s.size() < 4) s.insert(s.begin(), 1);
  bp.set_num(static_cast<int>(s[0]));
  bp.set_channels(static_cast<int>(s[1]));
  bp.set_height(static_cast<int>(s[2]));
  bp.set_width(static_cast<int>(s[3]));
  for (float v : b.values) bp.add_data(v);
}

std::string serialized(const proto::NetParameter& p) {
  std::string bytes;
  p.SerializeToString(&bytes);
  return bytes;
}

// The LeNet weights as a V1 .caffemodel (layers, enum types, 4-d legacy blobs) and as a
// current one (layer, BlobShape).
std::string v1_caffemodel(const std::vector<Blob>& blobs) {
  proto::NetParameter p;
  p.set_name("LeNet");
  for (const Blob& b : blobs) {
    if (p.layers_size() == 0 || p.layers(p.layers_size() - 1).name() != b.layer) {
      proto::V1LayerParameter* l = p.add_layers();
      l->set_name(b.layer);
      l->set_type(b.layer[0] == 'c' ? proto::V1LayerParameter::CONVOLUTION : proto::V1LayerParameter::INNER_PRODUCT);
      l->add_blobs_lr(1);
      l->add_blobs_lr(2);
    }
    fill_legacy(*p.mutable_layers(p.layers_size() - 1)->add_blobs(), b);
  }
  return serialized(p);
}

std::string current_caffemodel(const std::vector<Blob>& blobs) {
  proto::NetParameter p;
  p.set_name("LeNet");
  for (const Blob& b : blobs) {
    if (p.layer_size() == 0 || p.layer(p.layer_size() - 1).name() != b.layer) {
      proto::LayerParameter* l = p.add_layer();
      l->set_name(b.layer);
      l->set_type(b.layer[0] == 'c' ? "Convolution" : "InnerProduct");
    }
    proto::BlobProto* bp = p.mutable_layer(p.layer_size() - 1)->add_blobs();
    for (int64_t d : b.shape) bp->mutable_shape()->add_dim(d);
    for (float v : b.values) bp->add_data(v);
  }
  return serialized(p);
}

// V0: the blobs inside `layers { layer { blobs } }`, string types.
std::string v0_caffemodel(const std::vector<Blob>& blobs) {
  proto::NetParameter p;
  for (const Blob& b : blobs) {
    if (p.layers_size() == 0 || p.layers(p.layers_size() - 1).layer().name() != b.layer) {
      proto::V0LayerParameter* l = p.add_layers()->mutable_layer();
      l->set_name(b.layer);
      l->set_type(b.layer[0] == 'c' ? "conv" : "innerproduct");
    }
    fill_legacy(*p.mutable_layers(p.layers_size() - 1)->mutable_layer()->add_blobs(), b);
  }
  return serialized(p);
}

ParamStore lenet_store(const std::vector<Blob>& blobs) {
  ParamStore store;
  std::map<std::string, int> index;
  for (const Blob& b : blobs) store.add(fmt::format("{}.{}", b.layer, index[b.layer]++), "", b.shape, true);
  return store;
}

bool holds(const Tensor& t, const Blob& b) {
  return t.shape() == b.shape && std::memcmp(t.raw(), b.values.data(), t.bytes()) == 0;
}

TEST(Upgrade, V1CaffemodelLoadsTheSameTensors) {
  const std::vector<Blob> blobs = lenet_blobs();
  const std::string v1 = write_temp("lenet_v1.caffemodel", v1_caffemodel(blobs));
  const std::string v2 = write_temp("lenet_v2.caffemodel", current_caffemodel(blobs));
  const std::string v0 = write_temp("lenet_v0.caffemodel", v0_caffemodel(blobs));
  ParamStore a = lenet_store(blobs), b = lenet_store(blobs), c = lenet_store(blobs);
  EXPECT_EQ(load_weights(v1, a), 8);
  EXPECT_EQ(load_weights(v2, b), 8);
  EXPECT_EQ(load_weights(v0, c), 8);
  for (size_t i = 0; i < blobs.size(); ++i) {
    EXPECT_TRUE(holds(a.all()[i].data, blobs[i])) << a.all()[i].key;
    EXPECT_TRUE(holds(b.all()[i].data, blobs[i])) << b.all()[i].key;
    EXPECT_TRUE(holds(c.all()[i].data, blobs[i])) << c.all()[i].key << " (V0)";
  }
}

// `conv1` frozen (lr 0) in both forms of LeNet, for the fine-tune below.
std::string frozen_conv1(std::string net, const std::string& lr, const std::string& frozen) {
  net.replace(net.find(lr), lr.size(), frozen);
  return net;
}

TrainResult tune(const std::string& name, const std::string& net_text, const std::string& solver_type,
                 const std::string& weights) {
  const std::string net = write_temp(name + "_net.prototxt", net_text);
  const std::string solver =
      write_temp(name + "_solver.prototxt", "net: '" + net +
                                                "'\nbase_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 "
                                                "lr_policy: 'fixed'\nmax_iter: 2 random_seed: 3\n" +
                                                solver_type + "\n");
  TrainOptions o;
  o.solver = solver;
  o.weights = weights;
  o.out_dir = (fs::temp_directory_path() / ("bks_upgrade_" + name)).string();
  o.threads = 2;
  o.progress = false;
  fs::remove_all(o.out_dir);
  TrainResult r = train(o);
  EXPECT_EQ(r.iterations, 2);
  return r;
}

// train --weights old.caffemodel with a V1 net and a V1 solver runs exactly as the current
// net, weights and solver do: the same tensors after two iterations, bit for bit, and the
// layer whose blobs_lr is 0 still holds the file's values.
TEST(Upgrade, FineTuneFromV1CaffemodelMatchesTheCurrentFormat) {
  const std::vector<Blob> blobs = lenet_blobs();
  TrainResult old_run =
      tune("tune_v1", frozen_conv1(v1_lenet(), "blobs_lr: 1\n  blobs_lr: 2", "blobs_lr: 0 blobs_lr: 0"),
           "solver_type: SGD", write_temp("tune_v1.caffemodel", v1_caffemodel(blobs)));
  TrainResult new_run = tune("tune_v2",
                             frozen_conv1(current_lenet(), "param { lr_mult: 1 } param { lr_mult: 2 }",
                                          "param { lr_mult: 0 } param { lr_mult: 0 }"),
                             "type: 'SGD'", write_temp("tune_v2.caffemodel", current_caffemodel(blobs)));
  TensorFile a = load_safetensors((fs::path(old_run.run_dir) / "snapshots/iter_2.safetensors").string());
  TensorFile b = load_safetensors((fs::path(new_run.run_dir) / "snapshots/iter_2.safetensors").string());
  ParamStore keys = lenet_store(blobs);
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::string& key = keys.all()[i].key;
    const Tensor *ta = a.find(key), *tb = b.find(key);
    ASSERT_TRUE(ta && tb) << key;
    ASSERT_EQ(ta->shape(), tb->shape()) << key;
    EXPECT_EQ(std::memcmp(ta->raw(), tb->raw(), ta->bytes()), 0) << key << " differs between the V1 and current runs";
    EXPECT_EQ(holds(*ta, blobs[i]), i < 2) << key << (i < 2 ? " (lr 0) moved" : " did not train");
  }
}

// --- the command line -------------------------------------------------------------------

TEST(Upgrade, NetTextVerbRoundTrips) {
  const std::string in = write_temp("verb_v1.prototxt", v1_lenet());
  const std::string out = (fs::temp_directory_path() / "bks_upgrade_verb_out.prototxt").string();
  fs::remove(out);
  auto r = run_cmd("upgrade_net_proto_text " + in + " " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("V1"), std::string::npos) << r.output;
  proto::NetParameter written;
  read_prototxt(out, written);
  EXPECT_TRUE(same_message(written, parse_net(current_lenet())));
  // Again on its own output: nothing to do, the same bytes.
  const std::string again = out + ".again";
  r = run_cmd("upgrade_net_proto_text " + out + " " + again);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("already in the current"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(out, "net"), read_file(again, "net"));
  // V0 with net-level input: written as Caffe's tool writes it, the input an Input layer.
  const std::string v0 = write_temp("verb_v0.prototxt", kV0Net);
  r = run_cmd("upgrade_net_proto_text " + v0 + " " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  read_prototxt(out, written);
  EXPECT_EQ(written.input_size(), 0);
  ASSERT_EQ(written.layer_size(), 8);
  EXPECT_EQ(written.layer(0).type(), "Input");
  EXPECT_EQ(written.layer(1).convolution_param().pad(0), 2u);
}

TEST(Upgrade, NetBinaryAndSolverVerbsRoundTrip) {
  const std::vector<Blob> blobs = lenet_blobs();
  const std::string in = write_temp("verb_v1.caffemodel", v1_caffemodel(blobs));
  const std::string out = (fs::temp_directory_path() / "bks_upgrade_verb_out.caffemodel").string();
  auto r = run_cmd("upgrade_net_proto_binary " + in + " " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  proto::NetParameter written;
  read_binary_proto(out, written);
  EXPECT_EQ(written.layers_size(), 0);
  ASSERT_EQ(written.layer_size(), 4);
  EXPECT_EQ(written.layer(0).type(), "Convolution");
  EXPECT_EQ(written.layer(0).param(1).lr_mult(), 2.f);
  ParamStore store = lenet_store(blobs);
  EXPECT_EQ(load_weights(out, store), 8);
  for (size_t i = 0; i < blobs.size(); ++i) EXPECT_TRUE(holds(store.all()[i].data, blobs[i])) << i;

  const std::string solver = write_temp(
      "verb_solver.prototxt",
      "base_lr: 0.01 solver_type: ADAGRAD max_iter: 10\n"
      "net_param { layers { name: 'r' type: RELU bottom: 'x' top: 'y' } input: 'x' input_dim: 1 input_dim: 2 "
      "input_dim: 1 input_dim: 1 }\n");
  const std::string sout = (fs::temp_directory_path() / "bks_upgrade_verb_solver_out.prototxt").string();
  r = run_cmd("upgrade_solver_proto_text " + solver + " " + sout);
  ASSERT_EQ(r.code, 0) << r.output;
  proto::SolverParameter s;
  read_prototxt(sout, s);
  EXPECT_EQ(s.type(), "AdaGrad");
  EXPECT_FALSE(s.has_solver_type());
  EXPECT_EQ(s.base_lr(), 0.01f);
  ASSERT_EQ(s.net_param().layer_size(), 2);
  EXPECT_EQ(s.net_param().layer(1).type(), "ReLU");
}

TEST(Upgrade, V1NetRunsFromTheCommandLineWithOneNote) {
  const std::string net = write_temp("cli_v1.prototxt", v1_lenet());
  const std::string weights = write_temp("cli_v1.caffemodel", v1_caffemodel(lenet_blobs()));
  auto r = run_cmd("test --model " + net + " --weights " + weights + " --iterations 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(net + ": the file is in Caffe's V1 net format"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bakusoku upgrade_net_proto_text " + net), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("upgrade_net_proto_binary"), std::string::npos) << r.output;
}

TEST(Upgrade, BadInputExitsTwoNamingTheLayer) {
  const std::string mixed =
      write_temp("bad_mixed.prototxt",
                 "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 dim: 2 } } }\n"
                 "layers { name: 'old_relu' type: RELU bottom: 'x' top: 'y' }\n");
  const std::string out = (fs::temp_directory_path() / "bks_upgrade_bad_out").string();
  fs::remove(out);
  for (const std::string& cmd : {"time --model " + mixed, "upgrade_net_proto_text " + mixed + " " + out}) {
    auto r = run_cmd(cmd);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(mixed + ":1: layer 'in'"), std::string::npos) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
  }
  // An enum value V1 never had: a parse error at the value itself, naming the layer and field.
  const std::string unknown = write_temp("bad_enum.prototxt",
                                         "input: 'x' input_dim: 1 input_dim: 2 input_dim: 1 input_dim: 1\n"
                                         "layers {\n  name: 'weird'\n  type: WARP_DRIVE\n  bottom: 'x' top: 'y'\n}\n");
  auto r = run_cmd("time --model " + unknown);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(unknown + ":4:9: layer 'weird': field 'type': unknown value WARP_DRIVE"), std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  // A V1 type bakusoku does not implement: the error an unknown current type gets.
  const std::string v1_im2col = write_temp("bad_im2col_v1.prototxt",
                                           "input: 'x' input_dim: 1 input_dim: 2 input_dim: 3 input_dim: 3\n"
                                           "layers { name: 'cols' type: IM2COL bottom: 'x' top: 'y' }\n");
  const std::string v2_im2col = write_temp("bad_im2col_v2.prototxt",
                                           "input: 'x' input_dim: 1 input_dim: 2 input_dim: 3 input_dim: 3\n"
                                           "layer { name: 'cols' type: 'Im2col' bottom: 'x' top: 'y' }\n");
  auto a = run_cmd("time --model " + v1_im2col), b = run_cmd("time --model " + v2_im2col);
  EXPECT_EQ(a.code, 2) << a.output;
  EXPECT_EQ(b.code, 2) << b.output;
  auto tail = [](const std::string& s, const std::string& file) {
    const size_t at = s.find(file + ":2: ");
    return at == std::string::npos ? s : s.substr(at + file.size());
  };
  EXPECT_NE(a.output.find(v1_im2col + ":2: layer 'cols'"), std::string::npos) << a.output;
  EXPECT_EQ(tail(a.output, v1_im2col), tail(b.output, v2_im2col)) << a.output << b.output;
  // The verbs: a missing file, a solver giving both solver_type and type.
  r = run_cmd("upgrade_net_proto_binary /nonexistent/old.caffemodel " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/old.caffemodel"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  const std::string both = write_temp("bad_solver.prototxt", "solver_type: SGD type: 'Adam'\n");
  r = run_cmd("upgrade_solver_proto_text " + both + " " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(both + ": solver_type"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace bks
