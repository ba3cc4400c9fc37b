// Deployment: each pass on small hand-built graphs (what must fuse and what must not), the
// optimised graph against the training graph's TEST outputs, and the bundle file.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/dnnl_util.h"
#include "cli_util.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "core/sysinfo.h"
#include "core/worse.h"
#include "engine/calibrate.h"
#include "engine/deploy.h"
#include "engine/graph_cut.h"
#include "engine/quantize.h"
#include "engine/session.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "formats/weight_coding.h"
#include "formats/weights.h"
#include "graph/graph_edit.h"
#include "ops/conv_attrs.h"
#include "ops/dw_conv_int8.h"

namespace bks::test {
namespace {

namespace fs = std::filesystem;

// Both sessions run the same uniform [lo, hi) input (seed `seed`); the largest difference of
// their first outputs, and the reference output's largest magnitude.
struct OutputGap {
  double worst = 0, scale = 1e-12;
};
OutputGap output_gap(InferenceSession& reference, InferenceSession& other, float lo, float hi, uint64_t seed) {
  Rng rng(seed);
  Tensor& x = reference.value(reference.inputs()[0]);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform(lo, hi);
  other.value(other.inputs()[0]).copy_from(x);
  reference.run();
  other.run();
  const Tensor &ya = reference.value(reference.outputs()[0]), &yb = other.value(other.outputs()[0]);
  OutputGap g;
  for (int64_t i = 0; i < ya.numel(); ++i) g.scale = std::max(g.scale, std::fabs(static_cast<double>(ya.f32()[i])));
  for (int64_t i = 0; i < ya.numel(); ++i)
    g.worst = worse(g.worst, std::fabs(static_cast<double>(ya.f32()[i]) - yb.f32()[i]));
  return g;
}

std::string temp_path(const std::string& name) { return (fs::temp_directory_path() / ("bks_deploy_" + name)).string(); }

std::string input_layer(const std::string& top, std::vector<int> dims) {
  std::string d;
  for (int x : dims) d += " dim: " + std::to_string(x);
  return "layer { name: '" + top + "_in' type: 'Input' top: '" + top + "' input_param { shape {" + d + " } } }\n";
}

// Writes `net` and random weights for it; BatchNorm gets positive variances.
DeployOptions write_model(const std::string& name, const std::string& net) {
  DeployOptions o;
  o.model = temp_path(name + ".prototxt");
  o.weights = temp_path(name + ".safetensors");
  std::ofstream(o.model) << net;
  NetLoad nl = load_net_file(o.model);
  proto::NetState st;
  st.set_phase(proto::TEST);
  CpuBackend be(1);
  ParamStore store;
  Net n(build_caffe_graph(nl, st), proto::TEST, store, be, 1);
  Rng rng(5);
  for (auto& p : store.all())
    for (int64_t i = 0; i < p.data.numel(); ++i) p.data.f32()[i] = rng.uniform(-1.f, 1.f);
  for (int k = 0; k < n.num_nodes(); ++k) {
    if (n.graph().nodes[k].type != "BatchNorm") continue;
    Tensor& var = store.at(n.param_index(k, 1)).data;
    for (int64_t i = 0; i < var.numel(); ++i) var.f32()[i] = std::fabs(var.f32()[i]) + 0.5f;
    store.at(n.param_index(k, 2)).data.f32()[0] = 2.f;  // Caffe's moving-average normaliser
  }
  save_weights(o.weights, store);
  return o;
}

std::vector<std::string> types(const DeployModel& m) {
  std::vector<std::string> t;
  for (const Node& n : m.graph.nodes) t.push_back(n.type);
  return t;
}

const Node& node(const DeployModel& m, const std::string& name) {
  const Node* n = m.graph.find_node(name);
  EXPECT_NE(n, nullptr) << name;
  return *n;
}

// Runs the unoptimised TEST net and the bundle of the optimised model on the same random
// input; returns the largest difference relative to the output's largest magnitude.
double gap_to_unoptimised(const DeployOptions& o, const DeployModel& optimised) {
  NetLoad nl = load_net_file(o.model);
  proto::NetState st;
  st.set_phase(proto::TEST);
  CpuBackend be(2);
  ParamStore store;
  Net ref(build_caffe_graph(nl, st), proto::TEST, store, be, 1);
  load_weights(o.weights, store);
  Bundle b;
  b.graph = bundle_graph(optimised);
  b.weights = weights_by_layer(optimised);
  InferenceSession s(b, "test bundle", 2);
  Rng rng(9);
  for (size_t k = 0; k < s.inputs().size(); ++k) {
    Tensor& x = s.value(s.inputs()[k]);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform(-1.f, 1.f);
    ref.value(ref.inputs()[k]).copy_from(x);
  }
  ref.forward();
  s.run();
  EXPECT_EQ(ref.outputs().size(), s.outputs().size());
  double worst = 0;
  for (size_t k = 0; k < s.outputs().size(); ++k) {
    const Tensor &a = ref.value(ref.outputs()[k]), &c = s.value(s.outputs()[k]);
    EXPECT_EQ(a.shape(), c.shape());
    double scale = 1e-12;
    for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(a.f32()[i])));
    for (int64_t i = 0; i < a.numel(); ++i)
      worst = worse(worst, std::fabs(static_cast<double>(a.f32()[i]) - c.f32()[i]) / scale);
  }
  return worst;
}

// The training graph's TEST phase with only the training layers stripped (data in,
// logits out) against the optimised graph, on the same random input: the largest
// difference of `value` relative to its largest magnitude.
double logits_difference(const DeployOptions& o, const DeployModel& optimised, const std::string& value) {
  DeployModel plain = load_deploy_model(o);
  strip_training(plain);
  auto session = [](const DeployModel& d) {
    Bundle b;
    b.graph = bundle_graph(d);
    b.weights = weights_by_layer(d);
    return std::make_unique<InferenceSession>(b, "logits", 2);
  };
  auto ref = session(plain), opt = session(optimised);
  Rng rng(4);
  Tensor& x = ref->value(ref->inputs()[0]);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform(-1.f, 1.f);
  opt->value(opt->inputs()[0]).copy_from(x);
  ref->run();
  opt->run();
  const Tensor &a = ref->net().value(value), &b = opt->net().value(value);
  double scale = 1e-12, worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(a.f32()[i])));
  for (int64_t i = 0; i < a.numel(); ++i) worst = worse(worst, std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
  return worst / scale;
}

const char* kConvBnScaleRelu = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1'
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 bias_term: false } }
layer { name: 'bn1' type: 'BatchNorm' bottom: 'conv1' top: 'conv1' }
layer { name: 'scale1' type: 'Scale' bottom: 'conv1' top: 'conv1' scale_param { bias_term: true } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'conv2' type: 'Convolution' bottom: 'conv1' top: 'conv2' convolution_param { num_output: 4 kernel_size: 3 } }
)";

TEST(DeployPasses, FoldBatchNormAndScaleThenFuseRelu) {
  DeployOptions o = write_model("bn", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_EQ(types(m), (std::vector<std::string>{"Input", "Convolution", "Convolution"}));
  EXPECT_TRUE(node(m, "conv1").attrs.as<ConvAttrs>().bias_term);
  EXPECT_TRUE(node(m, "conv1").deploy.fusion.relu);
  EXPECT_FALSE(node(m, "conv2").deploy.fusion.any());
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

TEST(DeployPasses, ReluWhoseInputIsReadElsewhereIsNotFused) {
  DeployOptions o = write_model("shared_relu", input_layer("data", {1, 2, 6, 6}) + R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 3 kernel_size: 3 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'r1' }
layer { name: 'conv2' type: 'Convolution' bottom: 'conv1' top: 'conv2' convolution_param { num_output: 3 kernel_size: 1 } }
layer { name: 'sum' type: 'Eltwise' bottom: 'r1' bottom: 'conv2' top: 'out' eltwise_param { coeff: 1 coeff: 2 } }
)");
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_EQ(types(m), (std::vector<std::string>{"Input", "Convolution", "ReLU", "Convolution", "Eltwise"}));
  EXPECT_FALSE(node(m, "conv1").deploy.fusion.any());
  // coeff 2: not a plain residual sum, so the Eltwise stays.
  EXPECT_FALSE(node(m, "conv2").deploy.fusion.any());
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

TEST(DeployPasses, ResidualSumAndReluFuseIntoTheLastConvolution) {
  DeployOptions o = write_model("residual", input_layer("data", {2, 4, 7, 7}) + R"(
layer { name: 'a' type: 'Convolution' bottom: 'data' top: 'a' convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: 'a_relu' type: 'ReLU' bottom: 'a' top: 'a' }
layer { name: 'b' type: 'Convolution' bottom: 'a' top: 'b' convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: 'b_bn' type: 'BatchNorm' bottom: 'b' top: 'b' }
layer { name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b' top: 'sum' }
layer { name: 'sum_relu' type: 'ReLU' bottom: 'sum' top: 'sum' }
)");
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_EQ(types(m), (std::vector<std::string>{"Input", "Convolution", "Convolution"}));
  const FusedPostOps& f = node(m, "b").deploy.fusion;
  EXPECT_TRUE(f.residual_sum);
  EXPECT_TRUE(f.relu);
  EXPECT_TRUE(node(m, "a").deploy.fusion.relu);
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

// ReLU6 and Clip from 0 fuse into convolutions as a bounded ReLU (the input's scale puts
// outputs above the bound); Clip from elsewhere, and bounded ones after an InnerProduct, stay.
TEST(DeployPasses, BoundedReluFusesIntoConvolutionsOnly) {
  DeployOptions o = write_model("bounded", input_layer("data", {2, 8, 9, 9}) + R"(
layer { name: 'up' type: 'Power' bottom: 'data' top: 'up' power_param { scale: 20 } }
layer { name: 'a' type: 'Convolution' bottom: 'up' top: 'a' convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: 'a6' type: 'ReLU6' bottom: 'a' top: 'a' }
layer { name: 'b' type: 'Convolution' bottom: 'a' top: 'b' convolution_param { num_output: 8 kernel_size: 1 } }
layer { name: 'bclip' type: 'Clip' bottom: 'b' top: 'b' clip_param { min: 0 max: 2.5 } }
layer { name: 'c' type: 'Convolution' bottom: 'b' top: 'c' convolution_param { num_output: 8 kernel_size: 1 } }
layer { name: 'cclip' type: 'Clip' bottom: 'c' top: 'c' clip_param { min: -1 max: 1 } }
layer { name: 'fc' type: 'InnerProduct' bottom: 'c' top: 'fc' inner_product_param { num_output: 5 } }
layer { name: 'fc6' type: 'ReLU6' bottom: 'fc' top: 'fc' }
)");
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  // (the Power's scale folds into conv a)
  EXPECT_EQ(types(m),
            (std::vector<std::string>{"Input", "Convolution", "Convolution", "Convolution", "Clip", "InnerProduct", "ReLU6"}));
  EXPECT_TRUE(node(m, "a").deploy.fusion.bounded());
  EXPECT_EQ(node(m, "a").deploy.fusion.relu_max, 6.f);
  EXPECT_EQ(node(m, "b").deploy.fusion.relu_max, 2.5f);
  EXPECT_FALSE(node(m, "c").deploy.fusion.any());
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

TEST(DeployPasses, FoldConstantPowerLayers) {
  // A scale folds into the convolution reading it, padded or not; a shift only into one
  // that does not pad (zero padding would not see it); an identity goes; a Power right
  // after a convolution folds like a Scale.
  DeployOptions o = write_model("power", input_layer("data", {2, 3, 8, 8}) + R"(
layer { name: 'norm' type: 'Power' bottom: 'data' top: 'norm' power_param { scale: 0.5 shift: 0.1 } }
layer { name: 'a' type: 'Convolution' bottom: 'norm' top: 'a' convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: 'a_scale' type: 'Power' bottom: 'a' top: 'a' power_param { scale: 2 shift: -0.25 } }
layer { name: 'a_relu' type: 'ReLU' bottom: 'a' top: 'a' }
layer { name: 'half' type: 'Power' bottom: 'a' top: 'h' power_param { scale: 0.5 } }
layer { name: 'b' type: 'Convolution' bottom: 'h' top: 'b' convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: 'b_relu' type: 'ReLU' bottom: 'b' top: 'b' }
layer { name: 'shift' type: 'Power' bottom: 'b' top: 's' power_param { scale: 3 shift: 0.75 } }
layer { name: 'c' type: 'Convolution' bottom: 's' top: 'c' convolution_param { num_output: 2 kernel_size: 3 bias_term: false } }
layer { name: 'c_relu' type: 'ReLU' bottom: 'c' top: 'c' }
layer { name: 'same' type: 'Power' bottom: 'c' top: 'c2' }
layer { name: 'd' type: 'InnerProduct' bottom: 'c2' top: 'd' inner_product_param { num_output: 3 } }
)");
  DeployModel m = load_deploy_model(o);
  auto reports = run_deploy_passes(m);
  EXPECT_EQ(types(m),
            (std::vector<std::string>{"Input", "Power", "Convolution", "Convolution", "Convolution", "InnerProduct"}));
  EXPECT_EQ(m.graph.nodes[1].name, "norm");
  EXPECT_TRUE(node(m, "c").attrs.as<ConvAttrs>().bias_term);
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

TEST(DeployPasses, TapsThatReadOnlyPaddingAreTrimmed) {
  // Over a 1-row plane, a 3x3 pad-1 convolution's top and bottom rows of taps only ever
  // read padding: it becomes 1x3 with pad (0, 1). A dilated 5x5 keeps one row too. Over a
  // 2x2 plane every tap of a 3x3 pad-1 convolution reads input somewhere: it stays.
  DeployOptions o = write_model("trim", input_layer("data", {2, 4, 1, 7}) + R"(
layer { name: 'a' type: 'Convolution' bottom: 'data' top: 'a' convolution_param { num_output: 6 kernel_size: 3 pad: 1 } }
layer { name: 'a_relu' type: 'ReLU' bottom: 'a' top: 'a' }
layer { name: 'b' type: 'Convolution' bottom: 'a' top: 'b' convolution_param { num_output: 5 kernel_size: 5 pad: 4 dilation: 2 group: 1 } }
layer { name: 'pool' type: 'Pooling' bottom: 'b' top: 'p' pooling_param { pool: AVE kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 3 } }
layer { name: 'c' type: 'Convolution' bottom: 'p' top: 'c' convolution_param { num_output: 3 kernel_h: 3 kernel_w: 2 pad_h: 1 pad_w: 0 } }
layer { name: 'd' type: 'InnerProduct' bottom: 'c' top: 'd' inner_product_param { num_output: 3 } }
)");
  DeployModel m = load_deploy_model(o);
  auto reports = run_deploy_passes(m);
  EXPECT_EQ(node(m, "a").attrs.as<ConvAttrs>().kernel, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(node(m, "a").attrs.as<ConvAttrs>().pad, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(node(m, "b").attrs.as<ConvAttrs>().kernel, (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(node(m, "b").attrs.as<ConvAttrs>().pad, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(m.blob(static_cast<int>(&node(m, "a") - m.graph.nodes.data()), 0).shape(), (Shape{6, 4, 1, 3}));
  EXPECT_EQ(node(m, "c").attrs.as<ConvAttrs>().kernel, (std::vector<int64_t>{1, 2}));  // 3x2 over 1x2
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);

  DeployOptions o2 = write_model("no_trim", input_layer("data", {1, 4, 2, 2}) + R"(
layer { name: 'a' type: 'Convolution' bottom: 'data' top: 'a' convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }
)");
  DeployModel m2 = load_deploy_model(o2);
  run_deploy_passes(m2);
  EXPECT_EQ(node(m2, "a").attrs.as<ConvAttrs>().kernel, (std::vector<int64_t>{3, 3}));
}

// The SegNet/ENet forks' BN: INFERENCE mode (y = scale * x + shift) folds into the
// convolution before it; LEARN mode normalises with the batch's statistics and stays.
TEST(DeployPasses, FoldForkBNInInferenceModeOnly) {
  DeployOptions o = write_model("fork_bn", input_layer("data", {2, 3, 8, 8}) + R"(
layer { name: 'a' type: 'Convolution' bottom: 'data' top: 'a' convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: 'a_bn' type: 'BN' bottom: 'a' top: 'a' bn_param { bn_mode: INFERENCE } }
layer { name: 'a_relu' type: 'ReLU' bottom: 'a' top: 'a' }
layer { name: 'b' type: 'Convolution' bottom: 'a' top: 'b' convolution_param { num_output: 2 kernel_size: 3 bias_term: false } }
layer { name: 'b_bn' type: 'BN' bottom: 'b' top: 'b' }
)");
  DeployModel m = load_deploy_model(o);
  auto reports = run_deploy_passes(m);
  EXPECT_EQ(types(m), (std::vector<std::string>{"Input", "Convolution", "Convolution", "BN"}));
  EXPECT_TRUE(node(m, "a").deploy.fusion.relu);
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

// The MobileNet/ShuffleNet/SENet/PSPNet forks' layers in one small net: the depthwise
// convolution is a Convolution to the passes (its BatchNorm, Scale and ReLU fold in and
// keep its type), and the rest runs unchanged in the bundle.
TEST(DeployPasses, ForkLayersDeployAndTheDepthwiseConvolutionFolds) {
  DeployOptions o = write_model("fork_layers", input_layer("data", {2, 6, 9, 9}) + R"(
layer { name: 'dw' type: 'ConvolutionDepthwise' bottom: 'data' top: 'dw'
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 stride: 2 bias_term: false } }
layer { name: 'dw_bn' type: 'BatchNorm' bottom: 'dw' top: 'dw' }
layer { name: 'dw_scale' type: 'Scale' bottom: 'dw' top: 'dw' scale_param { bias_term: true } }
layer { name: 'dw_relu' type: 'ReLU' bottom: 'dw' top: 'dw' }
layer { name: 'shuffle' type: 'ShuffleChannel' bottom: 'dw' top: 'shuffle' shuffle_channel_param { group: 3 } }
layer { name: 'pw' type: 'DepthwiseConvolution' bottom: 'shuffle' top: 'pw'
        convolution_param { num_output: 6 kernel_size: 1 group: 2 } }
layer { name: 'se_pool' type: 'Pooling' bottom: 'pw' top: 'se_pool' pooling_param { pool: AVE global_pooling: true } }
layer { name: 'se_fc' type: 'Convolution' bottom: 'se_pool' top: 'se_fc' convolution_param { num_output: 6 kernel_size: 1 } }
layer { name: 'se_gate' type: 'Sigmoid' bottom: 'se_fc' top: 'se_fc' }
layer { name: 'se' type: 'Axpy' bottom: 'se_fc' bottom: 'pw' bottom: 'shuffle' top: 'se' }
layer { name: 'up' type: 'Interp' bottom: 'se' top: 'up' interp_param { zoom_factor: 3 pad_end: -1 } }
)");
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_EQ(types(m),
            (std::vector<std::string>{"Input", "ConvolutionDepthwise", "ShuffleChannel", "DepthwiseConvolution",
                                      "Pooling", "Convolution", "Sigmoid", "Axpy", "Interp"}));
  EXPECT_TRUE(node(m, "dw").attrs.as<ConvAttrs>().bias_term);
  EXPECT_TRUE(node(m, "dw").deploy.fusion.relu);
  EXPECT_LE(gap_to_unoptimised(o, m), 1e-4);
}

TEST(DeployPasses, StripTrainingOnlyLayers) {
  DeployOptions o = write_model("strip", input_layer("data", {4, 8}) + input_layer("label", {4}) + R"(
layer { name: 'ip1' type: 'InnerProduct' bottom: 'data' top: 'ip1' inner_product_param { num_output: 6 } }
layer { name: 'drop' type: 'Dropout' bottom: 'ip1' top: 'ip1' }
layer { name: 'ip2' type: 'InnerProduct' bottom: 'ip1' top: 'ip2' inner_product_param { num_output: 3 } }
layer { name: 'acc' type: 'Accuracy' bottom: 'ip2' bottom: 'label' top: 'acc' }
layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip2' bottom: 'label' top: 'loss' }
)");
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_EQ(types(m), (std::vector<std::string>{"Input", "InnerProduct", "InnerProduct", "Softmax"}));
  ASSERT_EQ(m.graph.outputs().size(), 1u);
  EXPECT_EQ(m.graph.values[m.graph.outputs()[0]].name, "prob");
  // The label input is gone with the layers that read it.
  for (const auto& v : m.graph.values) EXPECT_NE(v.name, "label");
}

// LeNet from the example prototxt (data layers, accuracy, loss): the bundle's
// probabilities equal softmax(ip2) of the training graph's TEST phase on the same batch.
// The TEST phase of a prototxt with every value kept after forward (for references).
struct KeptNet {
  CpuBackend backend{2};
  ParamStore store;
  std::unique_ptr<Net> net;
  explicit KeptNet(const std::string& model) {
    NetLoad nl = load_net_file(model);
    proto::NetState st;
    st.set_phase(proto::TEST);
    NetOptions keep;
    keep.reuse_buffers = false;
    net = std::make_unique<Net>(build_caffe_graph(nl, st), proto::TEST, store, backend, 1, keep);
  }
};

// `tag` keeps the files of tests that CTest runs in parallel apart.
DeployOptions lenet_with_initial_weights(const std::string& tag) {
  DeployOptions o;
  o.model = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";
  NetLoad nl = load_net_file(o.model);
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  CpuBackend be(1);
  ParamStore store;
  Net n(build_caffe_graph(nl, st), proto::TRAIN, store, be, 3);  // Caffe's fillers
  o.weights = temp_path("lenet_" + tag + ".safetensors");
  save_weights(o.weights, store);
  return o;
}

TEST(DeployLeNet, BundleMatchesTrainingGraph) {
  DeployOptions o = lenet_with_initial_weights("match");
  DeployResult r = deploy(o);
  std::string path = temp_path("lenet.bks");
  save_bundle(path, r.bundle);
  InferenceSession s(load_bundle(path), path, 2);

  KeptNet kept(o.model);
  Net& ref = *kept.net;
  load_weights(o.weights, kept.store);
  ref.forward(0);
  s.value(s.inputs()[0]).copy_from(ref.value("data"));
  s.run();
  const Tensor& prob = s.value(s.outputs()[0]);
  const Tensor& ip2 = ref.value("ip2");
  ASSERT_EQ(prob.shape(), ip2.shape());
  for (int64_t i = 0; i < ip2.dim(0); ++i) {
    const float* z = ip2.f32() + i * 10;
    double mx = *std::max_element(z, z + 10), sum = 0;
    for (int k = 0; k < 10; ++k) sum += std::exp(z[k] - mx);
    for (int k = 0; k < 10; ++k) {
      double p = std::exp(z[k] - mx) / sum;
      ASSERT_NEAR(prob.f32()[i * 10 + k], p, 1e-4 * std::max(p, 1e-3)) << "image " << i << " class " << k;
    }
  }
}

// The program in examples/embed runs the bundle from two threads at once and checks every
// result against a single-threaded run. Sessions are built in one thread and run in
// others, so every oneDNN primitive must take its scratchpad from the running thread: with
// oneDNN's own (per creating thread) a Winograd convolution crashed there, so the second
// run forces Winograd on the first convolution.
TEST(DeployEmbed, ExampleRunsFromTwoThreads) {
  DeployOptions o = write_model("embed", input_layer("data", {4, 3, 9, 9}) + kConvBnScaleRelu);
  auto run_example = [](const Bundle& b, const std::string& path) {
    save_bundle(path, b);
    std::string cmd = std::string(BKS_EMBED_EXAMPLE) + " " + path + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = pclose(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << path << ":\n" << out;
    EXPECT_NE(out.find("every result equals the single-threaded run"), std::string::npos) << out;
  };
  Bundle b = deploy(o).bundle;
  run_example(b, temp_path("embed.bks"));
  for (Node& n : b.graph.nodes)
    if (op_traits(n).convolution) {
      n.deploy.kernel = "winograd";
      break;
    }
  run_example(b, temp_path("embed_winograd.bks"));
  InferenceSession s(b, "winograd", 1);
  // oneDNN 2.6 has Winograd kernels for AVX-512 only; elsewhere the forced choice falls back
  // to direct and says so.
  const std::string expect = query_sysinfo().has("avx512f") ? "wino" : "oneDNN has no Winograd kernel";
  EXPECT_NE(s.net().describe().find(expect), std::string::npos) << s.net().describe();
}

TEST(DeployBundle, CorruptTruncatedAndNewerBundlesAreClearErrors) {
  DeployOptions o = write_model("bundle", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  DeployResult r = deploy(o);
  std::string good = temp_path("good.bks");
  save_bundle(good, r.bundle);
  EXPECT_NO_THROW(InferenceSession(load_bundle(good), good, 1));

  std::string bytes = read_file(good, "bundle");
  std::string cut = temp_path("cut.bks");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(load_bundle(cut), InputError);

  Bundle newer = r.bundle;
  std::string future = temp_path("future.bks");
  save_bundle(future, newer);
  std::string fb = read_file(future, "bundle");
  auto at = fb.find("\"bakusoku_bundle_version\":\"2\"");
  ASSERT_NE(at, std::string::npos);
  fb.replace(at, 29, "\"bakusoku_bundle_version\":\"9\"");
  std::ofstream(future, std::ios::binary) << fb;
  try {
    load_bundle(future);
    FAIL() << "newer bundle accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
  // Version 1 (Caffe text with proto extensions) is refused by name, with what to do.
  fb.replace(at, 29, "\"bakusoku_bundle_version\":\"1\"");
  std::ofstream(future, std::ios::binary) << fb;
  try {
    load_bundle(future);
    FAIL() << "version 1 bundle accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("version 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deploy"), std::string::npos) << e.what();
  }

  Bundle wrong = r.bundle;
  wrong.weights.begin()->second = Tensor({1});
  EXPECT_THROW(InferenceSession(wrong, "wrong", 1), InputError);

  // Through the command line: exit code 2 and one line naming the file.
  CmdResult c = run_cmd("bench " + cut + " --iterations 1");
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_NE(c.output.find(cut), std::string::npos) << c.output;
}

// deploy's layout choice (choose_activation_layout). On AVX-512 a bundle that records
// activation_layout "blocked" runs its convolutions of 16k outputs into oneDNN's 16-channel
// blocks, and computes what the channels-last bundle computes through depthwise and 1x1
// convolutions, pooling, a residual sum, a concat and an inner product. An unknown layout
// is a corrupt bundle.
TEST(DeployBundle, BlockedActivationLayoutComputesTheSameOutputs) {
  DeployOptions o = write_model("blocked", input_layer("data", {2, 3, 16, 16}) + R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1'
        convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'dw' type: 'Convolution' bottom: 'conv1' top: 'dw'
        convolution_param { num_output: 16 group: 16 kernel_size: 3 pad: 1 } }
layer { name: 'pw' type: 'Convolution' bottom: 'dw' top: 'pw' convolution_param { num_output: 32 kernel_size: 1 } }
layer { name: 'pool' type: 'Pooling' bottom: 'pw' top: 'pool' pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: 'conv2' type: 'Convolution' bottom: 'pool' top: 'conv2'
        convolution_param { num_output: 32 kernel_size: 3 pad: 1 } }
layer { name: 'sum' type: 'Eltwise' bottom: 'pool' bottom: 'conv2' top: 'sum' }
layer { name: 'cat' type: 'Concat' bottom: 'sum' bottom: 'pool' top: 'cat' }
layer { name: 'ip' type: 'InnerProduct' bottom: 'cat' top: 'ip' inner_product_param { num_output: 10 } }
)");
  DeployResult r = deploy(o);
  Bundle plain = r.bundle, blocked = r.bundle;
  plain.info.erase(kActivationLayoutKey);
  blocked.info[kActivationLayoutKey] = kBlockedLayout;
  InferenceSession a(plain, "plain", 1), b(blocked, "blocked", 1);
  const OutputGap g = output_gap(a, b, -1.f, 1.f, 3);
  EXPECT_LT(g.worst, 1e-5 * g.scale) << g.worst << " of " << g.scale;
  if (onednn_has_avx512()) {
    auto layout_of = [](InferenceSession& s, const std::string& value) {
      const int v = s.net().graph().find_value(value);
      EXPECT_GE(v, 0) << value;
      return v < 0 ? dnnl::memory::desc() : s.net().plan().layout[static_cast<size_t>(v)];
    };
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims pw{2, 32, 16, 16};
    EXPECT_TRUE(layout_of(b, "pw") == dnnl::memory::desc(pw, dnnl::memory::data_type::f32, tag::nChw16c));
    EXPECT_TRUE(layout_of(a, "pw") == dnnl::memory::desc(pw, dnnl::memory::data_type::f32, tag::nhwc));
  }
  Bundle odd = r.bundle;
  odd.info[kActivationLayoutKey] = "sideways";
  try {
    InferenceSession s(odd, "odd.bks", 1);
    FAIL() << "an unknown activation layout was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("odd.bks: corrupt bundle: activation_layout 'sideways'"), std::string::npos)
        << e.what();
  }
}

// --layout: auto (the default) times both layouts on AVX-512 and prints the table; blocked
// and channels-last take that one, recorded in the bundle; anything else is refused.
TEST(DeployCli, LayoutOptionTimesOrTakesTheConvolutionsLayout) {
  DeployOptions o = write_model("layout", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  const std::string out = temp_path("layout.bks"),
                    deploy = "deploy --model " + o.model + " --weights " + o.weights + " -o " + out;
  const bool avx512 = onednn_has_avx512();
  CmdResult a = run_cmd(deploy);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output.find("by the convolutions' output layout") != std::string::npos, avx512) << a.output;
  CmdResult b = run_cmd(deploy + " --layout blocked");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(b.output.find("by the convolutions' output layout"), std::string::npos) << b.output;
  EXPECT_EQ(load_bundle(out).info.count(kActivationLayoutKey), avx512 ? 1u : 0u);
  CmdResult c = run_cmd(deploy + " --layout channels-last");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(load_bundle(out).info.count(kActivationLayoutKey), 0u);
  CmdResult bad = run_cmd(deploy + " --layout sideways");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--layout"), std::string::npos) << bad.output;
}

TEST(DeployCli, DeployThenBenchWithComparison) {
  DeployOptions o = write_model("cli", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  std::string out = temp_path("cli.bks");
  // Channels-last, where direct and Winograd kernels are timed against each other (with
  // oneDNN's 16-channel blocks there is one kernel only, and on this tiny net either layout
  // can win on a busy machine).
  CmdResult d = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out +
                        " --print-graph --layout channels-last");
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("folded BatchNorm 'bn1' into Convolution 'conv1'"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("+relu"), std::string::npos) << d.output;
  CmdResult b = run_cmd("bench " + out + " --batch 1,3 --iterations 5 --json --compare " + o.model + " " + o.weights);
  ASSERT_EQ(b.code, 0) << b.output;
  const auto compared = nlohmann::json::parse(b.output.substr(b.output.find('{')));
  ASSERT_EQ(compared["results"].size(), 2u) << b.output;
  EXPECT_EQ(compared["results"][1]["batch"], 3) << b.output;
  for (const auto& row : compared["results"])  // null (NaN) fails get<double>
    EXPECT_LE(row["unoptimised"]["max_relative_difference"].get<double>(), 1e-4) << b.output;
  CmdResult l = run_cmd("bench " + out + " --iterations 3 --json --layers");
  ASSERT_EQ(l.code, 0) << l.output;
  auto j = nlohmann::json::parse(l.output.substr(l.output.find('{')));
  ASSERT_EQ(j["results"][0]["layers"].size(), 3u) << l.output;  // Input, conv1 (+bn, scale, relu), conv2
  EXPECT_GT(j["results"][0]["layers"][1]["gflops"].get<double>(), 0.0) << l.output;
  // Each layer names the values it writes (bench/ort_layers.py matches them with ONNX
  // Runtime's nodes): the fused conv1 writes the blob its ReLU rewrote.
  EXPECT_EQ(j["results"][0]["layers"][1]["outputs"], nlohmann::json::array({"conv1"})) << l.output;
  EXPECT_EQ(j["results"][0]["layers"][2]["outputs"], nlohmann::json::array({"conv2"})) << l.output;
  // Autotuning's choice for each convolution is saved in the bundle.
  Bundle saved = load_bundle(out);
  int convs = 0;
  for (const Node& n : saved.graph.nodes)
    if (op_traits(n).convolution) {
      ++convs;
      EXPECT_TRUE(n.deploy.kernel == "direct" || n.deploy.kernel == "winograd" || n.deploy.kernel == "winograd_f4")
          << n.name << ": " << n.deploy.kernel;
    }
  EXPECT_EQ(convs, 2);
  // And it is a measurement: each tuned convolution reports both kernels' times, keeps the
  // faster, and the bundle records that one.
  int tuned = 0;
  for (size_t at = d.output.find("(autotuned: "); at != std::string::npos; at = d.output.find("(autotuned: ", at + 1)) {
    char chosen[16] = {}, other[16] = {};
    double t_chosen = -1, t_other = -1;
    ASSERT_EQ(std::sscanf(d.output.c_str() + at, "(autotuned: %15s %lf ms vs %15s %lf ms)", chosen, &t_chosen, other,
                          &t_other),
              4)
        << d.output.substr(at, 80);
    EXPECT_LE(t_chosen, t_other) << d.output.substr(at, 80);
    EXPECT_NE(std::string(chosen), std::string(other));
    const size_t line = d.output.rfind('\n', at) + 1;
    const size_t name_at = d.output.find_first_not_of(' ', line);
    const std::string layer = d.output.substr(name_at, d.output.find(' ', name_at) - name_at);
    bool recorded = false;
    for (const Node& n : saved.graph.nodes)
      if (op_traits(n).convolution && n.name == layer) recorded = n.deploy.kernel == chosen;
    EXPECT_TRUE(recorded) << layer << ": " << d.output.substr(line, d.output.find('\n', at) - line);
    ++tuned;
  }
  // oneDNN 2.6 has Winograd kernels for AVX-512 only: elsewhere each convolution says that
  // it had nothing to time against.
  int untunable = 0;
  for (size_t at = d.output.find("(direct: oneDNN has no Winograd kernel"); at != std::string::npos;
       at = d.output.find("(direct: oneDNN has no Winograd kernel", at + 1))
    ++untunable;
  if (query_sysinfo().has("avx512f"))
    EXPECT_EQ(tuned, convs) << d.output;
  else
    EXPECT_EQ(untunable, convs) << d.output;
  // An untrained net deploys for timing, its blobs from their fillers.
  const std::string untrained = temp_path("untrained.bks");
  CmdResult u = run_cmd("deploy --model " + o.model + " --random-weights -o " + untrained);
  ASSERT_EQ(u.code, 0) << u.output;
  Bundle random = load_bundle(untrained);
  EXPECT_EQ(random.info["source_weights"], "random (each layer's filler, seed 1)");
  EXPECT_EQ(random.weights.size(), saved.weights.size());
  EXPECT_EQ(run_cmd("bench " + untrained + " --iterations 2").code, 0);
  EXPECT_EQ(run_cmd("deploy --model " + o.model + " -o " + untrained).code, 2) << "neither weights nor random";
  saved.graph.nodes[1].deploy.kernel = "fastest";
  EXPECT_THROW(InferenceSession(saved, "bad choice", 1), InputError);
  // --batch auto: timed candidates up to the memory cap, the choice written into the bundle.
  CmdResult a = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out + " --batch auto");
  ASSERT_EQ(a.code, 0) << a.output;
  auto chosen = a.output.find("chosen: batch ");
  ASSERT_NE(chosen, std::string::npos) << a.output;
  int64_t batch = std::stoll(a.output.substr(chosen + 14));
  EXPECT_EQ(InferenceSession(load_bundle(out), out, 1).batch(), batch);
  CmdResult tiny = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out +
                           " --batch auto --memory-cap 0.0001");
  EXPECT_EQ(tiny.code, 2) << tiny.output;
  EXPECT_NE(tiny.output.find("--memory-cap"), std::string::npos) << tiny.output;
  CmdResult bad = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out + " --precision int4");
  EXPECT_EQ(bad.code, 2) << bad.output;
}

TEST(DeployPasses, FusedLayersRefuseTraining) {
  std::string net = input_layer("data", {1, 1, 4, 4}) +
                    "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' convolution_param { num_output: 1 "
                    "kernel_size: 3 } }\n";
  std::string path = temp_path("fused_train.prototxt");
  std::ofstream(path) << net;
  NetLoad nl = load_net_file(path);
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  CpuBackend be(1);
  ParamStore store;
  Graph g = build_caffe_graph(nl, st);
  EXPECT_NO_THROW(Net(g, proto::TRAIN, store, be, 1));
  g.nodes[1].deploy.fusion.relu = true;
  ParamStore store2;
  EXPECT_THROW(Net(g, proto::TRAIN, store2, be, 1), InputError);
}

TEST(DeployPasses, DeploymentFieldsAreNotCaffeFields) {
  // Fused post-ops, the chosen kernel and the INT8 thresholds are IR fields, never read
  // from a prototxt (so no Caffe file sets them by accident).
  std::string net = input_layer("data", {1, 1, 4, 4}) +
                    "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' convolution_param { num_output: 1 "
                    "kernel_size: 3 } fusion_param { relu: true } }\n";
  std::string path = temp_path("fusion_field.prototxt");
  std::ofstream(path) << net;
  EXPECT_THROW(load_net_file(path), InputError);
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// `test` scores a bundle on the data its net was tested on, like the prototxt and weights.
TEST(DeployCli, TestVerbScoresABundleLikeTheTrainingGraph) {
  DeployOptions o = lenet_with_initial_weights("testverb");
  std::string bundle = temp_path("lenet_test.bks");
  save_bundle(bundle, deploy(o).bundle);
  CmdResult b = run_cmd("test --model " + bundle + " --iterations 3");
  ASSERT_EQ(b.code, 0) << b.output;
  CmdResult p = run_cmd("test --model " + o.model + " --weights " + o.weights + " --iterations 3");
  ASSERT_EQ(p.code, 0) << p.output;
  auto accuracy = [](const std::string& out) {
    auto at = out.find("\naccuracy = ");
    return at == std::string::npos ? std::string("none") : out.substr(at + 12, 6);
  };
  EXPECT_EQ(accuracy(b.output), accuracy(p.output)) << b.output << p.output;
  EXPECT_NE(b.output.find("accuracy_top5"), std::string::npos) << b.output;

  // A bundle deployed from a deploy prototxt has no data to score on.
  DeployOptions d = write_model("nodata", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  std::string nodata = temp_path("nodata.bks");
  save_bundle(nodata, deploy(d).bundle);
  CmdResult e = run_cmd("test --model " + nodata);
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("records no data layer"), std::string::npos) << e.output;

  // Data whose items are not the bundle's input shape (20x20 images for a 28x28 LeNet).
  std::string images = temp_path("small-images-idx3-ubyte"), labels = temp_path("small-labels-idx1-ubyte");
  auto be32 = [](uint32_t v) { return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; };
  std::ofstream(images, std::ios::binary) << be32(0x803) + be32(4) + be32(20) + be32(20) + std::string(4 * 400, '\0');
  std::ofstream(labels, std::ios::binary) << be32(0x801) + be32(4) + std::string(4, '\0');
  CmdResult w = run_cmd("test --model " + bundle + " --data " + images + " --iterations 1");
  EXPECT_EQ(w.code, 2) << w.output;
  EXPECT_NE(w.output.find("the bundle takes"), std::string::npos) << w.output;
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// An example net (Input layers of images and labels, batch `from`) at batch `to`, with
// random weights.
DeployOptions example_with_batch(const std::string& file, int from, int to) {
  std::string text = read_file(std::string(BKS_SOURCE_DIR) + "/examples/" + file, "prototxt");
  for (auto [a, b] : {std::pair{fmt::format("dim: {} dim: 3", from), fmt::format("dim: {} dim: 3", to)},
                      std::pair{fmt::format("shape {{ dim: {} }}", from), fmt::format("shape {{ dim: {} }}", to)}}) {
    auto at = text.find(a);
    EXPECT_NE(at, std::string::npos) << a;
    if (at != std::string::npos) text.replace(at, a.size(), b);
  }
  return write_model(fs::path(file).stem().string(), text);
}

// examples/resnet (ResNet-18 for 32x32): every BatchNorm and Scale folds, every shortcut
// sum and ReLU fuses, and the optimised graph computes what the training graph does.
TEST(DeployResNet, EveryBatchNormFoldsAndEveryShortcutFuses) {
  DeployOptions o = example_with_batch("resnet/resnet18_cifar.prototxt", 64, 2);
  DeployModel m = load_deploy_model(o);
  auto reports = run_deploy_passes(m);
  std::map<std::string, int> count;
  for (const Node& n : m.graph.nodes) ++count[n.type];
  EXPECT_EQ(count, (std::map<std::string, int>{
                       {"Input", 1}, {"Convolution", 20}, {"Pooling", 1}, {"InnerProduct", 1}, {"Softmax", 1}}));
  int sums = 0, relus = 0;
  for (const Node& n : m.graph.nodes) {
    sums += n.deploy.fusion.residual_sum;
    relus += n.deploy.fusion.relu;
  }
  EXPECT_EQ(sums, 8);
  EXPECT_EQ(relus, 17);
  EXPECT_LE(logits_difference(o, m, "fc"), 1e-4);
}

TEST(DeployCifar, QuickNetMatchesTrainingGraph) {
  DeployOptions o = example_with_batch("cifar10/cifar10_quick_train_test.prototxt", 100, 4);
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  int relus = 0;
  for (const Node& n : m.graph.nodes) relus += n.deploy.fusion.relu;
  EXPECT_EQ(relus, 2);  // conv2, conv3 (relu1 follows a pooling)
  EXPECT_LE(logits_difference(o, m, "ip2"), 1e-4);
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// The BF16 bundle `bf16` against the FP32 deployment of `o`, on the same random input: the
// BF16 net's description (kernels, layouts, value types) and how far its outputs are.
struct Bf16Comparison {
  std::string described;
  OutputGap gap;
};
Bf16Comparison against_fp32(const Bundle& bf16, DeployOptions o, uint64_t seed) {
  o.precision = Precision::fp32;
  DeployResult f = deploy(o);
  InferenceSession a(bf16, "bf16", 2), b(f.bundle, "fp32", 2);
  return {a.net().describe(), output_gap(b, a, -1.f, 1.f, seed)};
}

// BF16 where the CPU has it: the bundle records the precision, its kernels are bf16, and
// its outputs stay within bfloat16's precision of FP32's. Elsewhere: a clear error.
TEST(DeployBf16, OutputsWithinBfloat16PrecisionOrAClearError) {
  DeployOptions o = write_model("bf16", input_layer("data", {2, 3, 9, 9}) + kConvBnScaleRelu);
  o.precision = Precision::bf16;
  if (!cpu_has_bf16()) {
    EXPECT_THROW(deploy(o), InputError);
    GTEST_SKIP() << "no bfloat16 instructions on this CPU";
  }
  DeployResult r = deploy(o);
  EXPECT_EQ(r.bundle.info.at("precision"), "bf16");
  for (const Node& n : r.bundle.graph.nodes)
    EXPECT_EQ(n.deploy.precision, op_traits(n).weighted_linear ? Precision::bf16 : Precision::fp32) << n.name;
  const auto [d, g] = against_fp32(r.bundle, o, 2);
  EXPECT_NE(d.find("bf16"), std::string::npos) << d;
  EXPECT_GT(g.worst, 0.0);             // it did compute in bf16
  EXPECT_LE(g.worst / g.scale, 3e-2);  // bf16 keeps 8 bits of mantissa; two layers of rounding
}

// examples/resnet's ResNet-18 (its logits as the output) in BF16: every convolution whose
// readers are bf16 convolutions, shortcut sums included, writes bf16, so values stay bf16
// from the first convolution to the last; the logits stay within bfloat16's precision of
// FP32's over the 20 layers.
TEST(DeployBf16, ResNetKeepsValuesBf16BetweenConvolutions) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no bfloat16 instructions on this CPU";
  std::string text = read_file(std::string(BKS_SOURCE_DIR) + "/examples/resnet/resnet18_cifar.prototxt", "prototxt");
  text.replace(text.find("dim: 64 dim: 3"), 14, "dim: 2 dim: 3");
  text.erase(text.find("layer {\n  name: \"accuracy\""));  // the logits are the output
  // Filler weights keep the values in range (MSRA), where BatchNorms without statistics
  // would scale by 1 / sqrt(eps) each.
  text = std::regex_replace(text, std::regex("layer \\{\n  name: \"\\w+\"\n  type: \"BatchNorm\"[^}]*\\}\n"), "");
  ASSERT_EQ(text.find("BatchNorm"), std::string::npos);
  DeployOptions o = write_model("resnet18_bf16", text);
  o.random_weights = true;  // the fillers' (MSRA) weights, not write_model's
  o.autotune = false;
  o.precision = Precision::bf16;
  DeployResult r = deploy(o);
  std::vector<std::string> writers;
  for (const Node& n : r.bundle.graph.nodes)
    if (n.deploy.bf16_output) writers.push_back(n.name);
  // All 20 convolutions but the last, which the global pooling reads for the inner product.
  EXPECT_EQ(writers.size(), 19u) << fmt::format("{}", fmt::join(writers, " "));
  const Node* last = r.bundle.graph.find_node("res5b_b");
  ASSERT_NE(last, nullptr);
  EXPECT_FALSE(last->deploy.bf16_output);
  // The choice travels in the bundle.
  const std::string path = temp_path("resnet18_bf16.bks");
  save_bundle(path, r.bundle);
  const auto [d, g] = against_fp32(load_bundle(path), o, 3);
  size_t bf16_values = 0;
  for (size_t at = d.find(" bf16 output"); at != std::string::npos; at = d.find(" bf16 output", at + 1)) ++bf16_values;
  EXPECT_EQ(bf16_values, 19u) << d;
  EXPECT_GT(g.worst, 0.0);
  EXPECT_LE(g.worst / g.scale, 2e-2) << g.worst << " of " << g.scale;
}

// An Inception-style block in BF16: branch convolutions write bf16 channels-last, the
// Concat joins them as bf16 (even channel counts) and a max pooling and a convolution read
// that, within bfloat16's precision of FP32. With an odd channel count the Concat writes
// f32 channels-last instead, converting its inputs.
TEST(DeployBf16, ConcatJoinsBf16Branches) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no bfloat16 instructions on this CPU";
  for (int second : {48, 47}) {
    SCOPED_TRACE(second);
    DeployOptions o =
        write_model(fmt::format("bf16_concat_{}", second), input_layer("data", {2, 16, 12, 12}) + fmt::format(R"(
layer {{ name: 'a' type: 'Convolution' bottom: 'data' top: 'a' convolution_param {{ num_output: 32 kernel_size: 1 }} }}
layer {{ name: 'b' type: 'Convolution' bottom: 'data' top: 'b' convolution_param {{ num_output: {} kernel_size: 3 pad: 1 }} }}
layer {{ name: 'cat' type: 'Concat' bottom: 'a' bottom: 'b' top: 'cat' }}
layer {{ name: 'pool' type: 'Pooling' bottom: 'cat' top: 'pool' pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: 'c' type: 'Convolution' bottom: 'pool' top: 'c' convolution_param {{ num_output: 8 kernel_size: 3 }} }}
)",
                                                                                                              second));
    o.autotune = false;
    o.precision = Precision::bf16;
    const auto [d, g] = against_fp32(deploy(o).bundle, o, 5);
    const bool joined = d.find("copies (bf16)] bf16 output") != std::string::npos;
    EXPECT_EQ(joined, second % 2 == 0) << d;
    EXPECT_NE(d.find(second % 2 == 0 ? "bf16 output" : "channels-last copies]"), std::string::npos) << d;
    EXPECT_GT(g.worst, 0.0);
    EXPECT_LE(g.worst / g.scale, 2e-2) << g.worst << " of " << g.scale;
  }
}

// A bundle (hand-edited, or written by another version) whose bf16 value reaches a layer
// that reads f32 only: the value is planned f32 (its writer converts), never f32 arithmetic
// on bf16 bytes; the outputs are those of the bundle as deploy wrote it. bf16_output on a
// node that does not compute in bf16 is an error.
TEST(DeployBf16, Bf16ValueReadByAnF32LayerBecomesF32) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no bfloat16 instructions on this CPU";
  DeployOptions o = write_model("bf16_to_f32", input_layer("data", {2, 3, 9, 9}) + R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: 'sig' type: 'Sigmoid' bottom: 'conv1' top: 'sig' }
)");
  o.autotune = false;
  o.precision = Precision::bf16;
  DeployResult r = deploy(o);
  Bundle edited = r.bundle;
  Node* conv = const_cast<Node*>(edited.graph.find_node("conv1"));
  ASSERT_NE(conv, nullptr);
  EXPECT_FALSE(conv->deploy.bf16_output);  // its reader takes f32
  conv->deploy.bf16_output = true;
  InferenceSession as_written(r.bundle, "bf16", 1), changed(edited, "edited", 1);
  EXPECT_EQ(changed.net().describe().find("bf16 output"), std::string::npos) << changed.net().describe();
  OutputGap g = output_gap(as_written, changed, -1.f, 1.f, 4);
  EXPECT_EQ(g.worst, 0.0);
  conv->deploy.precision = Precision::fp32;
  EXPECT_THROW(InferenceSession(edited, "edited", 1), InputError);  // bf16_output without bf16
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// The calibrators on known distributions: a uniform one (nothing to clip) and a Gaussian
// with one far outlier (min-max follows the outlier, the others do not).
TEST(Calibration, ThresholdsOnKnownDistributions) {
  Rng rng(11);
  std::vector<float> uniform(200000), gauss(200000);
  for (auto& x : uniform) x = rng.uniform(-1.f, 1.f);
  for (auto& x : gauss) {
    float u1 = std::max(rng.uniform(0.f, 1.f), 1e-7f), u2 = rng.uniform(0.f, 1.f);
    x = std::sqrt(-2.f * std::log(u1)) * std::cos(6.2831853f * u2);
  }
  gauss[123] = 100.f;
  auto hist = [](const std::vector<float>& v) {
    AbsHistogram h;
    for (float x : v) h.range = std::max(h.range, static_cast<double>(std::fabs(x)));
    h.add(v.data(), static_cast<int64_t>(v.size()));
    return h;
  };
  AbsHistogram hu = hist(uniform), hg = hist(gauss);
  EXPECT_NEAR(threshold_minmax(hu), 1.0, 1e-3);
  EXPECT_NEAR(threshold_percentile(hu, 99.99), 1.0, 2e-3);
  EXPECT_GT(threshold_entropy(hu), 0.9);
  EXPECT_GT(threshold_mse(hu), 0.95);
  EXPECT_NEAR(threshold_minmax(hg), 100.0, 1e-3);
  EXPECT_LT(threshold_percentile(hg, 99.99), 5.0);
  EXPECT_GT(threshold_percentile(hg, 99.99), 3.0);
  double e = threshold_entropy(hg);
  EXPECT_LT(e, 10.0);
  EXPECT_GT(e, 2.0);
  double m = threshold_mse(hg);  // 127 steps over N(0, 1): about 4 sigma
  EXPECT_LT(m, 6.0);
  EXPECT_GT(m, 3.0);
}

// A ResNet stem's output after BN and ReLU: sixteen tall spikes below 0.5 (each channel's
// constant answer to the blank background) hold 80% of the values, the object's features
// spread up to 5. The KL search matched the spikes and clipped at about 0.5, which cost a
// small ResNet 12 points of accuracy; the squared-error search keeps the features' range.
TEST(Calibration, MseKeepsTheSignalUnderTallSpikes) {
  Rng rng(5);
  std::vector<float> x;
  for (int c = 0; c < 16; ++c)
    for (int k = 0; k < 25000; ++k) x.push_back(0.03f * static_cast<float>(c + 1));
  for (int k = 0; k < 100000; ++k) {
    float u1 = std::max(rng.uniform(0.f, 1.f), 1e-7f), u2 = rng.uniform(0.f, 1.f);
    x.push_back(std::fabs(1.2f * std::sqrt(-2.f * std::log(u1)) * std::cos(6.2831853f * u2)));
  }
  AbsHistogram h;
  for (float v : x) h.range = std::max(h.range, static_cast<double>(v));
  h.add(x.data(), static_cast<int64_t>(x.size()));
  const double p99 = threshold_percentile(h, 99.0);  // 99% of all values: deep in the features' tail
  EXPECT_GT(threshold_mse(h), p99);
  EXPECT_LT(threshold_mse(h), h.range);
  EXPECT_LT(threshold_entropy(h), p99);  // why entropy is no longer the default
}

// deploy --calib: the table (every input of a convolution or inner product) is in the bundle.
TEST(Calibration, DeploySavesTheTableInTheBundle) {
  DeployOptions o = lenet_with_initial_weights("calib");
  std::string out = temp_path("calib.bks");
  CmdResult c = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out +
                        " --calib test --calib-batches 2 --calib-method percentile");
  ASSERT_EQ(c.code, 0) << c.output;
  Bundle b = load_bundle(out);
  auto table = nlohmann::json::parse(b.info.at("calibration"));
  EXPECT_EQ(table["method"], "percentile");
  for (const char* v : {"data", "pool1", "pool2", "ip1"}) {
    ASSERT_TRUE(table["threshold"].contains(v)) << table.dump();
    EXPECT_GT(table["threshold"][v].get<double>(), 0.0) << v;
  }
  CmdResult bad = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + out +
                          " --calib test --calib-method kl");
  EXPECT_EQ(bad.code, 2) << bad.output;
  // The saved table is reusable: an INT8 deploy from it needs no calibration run, and
  // quantizes with exactly those thresholds.
  std::string reused = temp_path("calib_reused.bks");
  CmdResult r = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + reused +
                        " --precision int8 --int8-layers all --calib-from " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  Bundle q = load_bundle(reused);
  for (const Node& n : q.graph.nodes) {
    if (!op_traits(n).weighted_linear) continue;
    const float want = table["threshold"][q.graph.values[n.inputs[0]].name].get<float>();
    EXPECT_FLOAT_EQ(n.deploy.int8_input_threshold, want) << n.name;
  }
  CmdResult none = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + reused +
                           " --precision int8 --calib-from " + reused.substr(0, reused.size() - 4) + "_missing.bks");
  EXPECT_EQ(none.code, 2) << none.output;
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// INT8 (convolutions quantized with entropy calibration on the test set): top-1 agrees
// with FP32 on at least 99% of real test images, for a LeNet trained briefly here.
TEST(DeployInt8, TopOneAgreesWithFp32OnTestImages) {
  std::string solver = temp_path("int8_solver.prototxt"), run = temp_path("int8_run");
  fs::remove_all(run);
  std::ofstream(solver) << "net: \"" << BKS_SOURCE_DIR << "/examples/fashion_mnist/lenet_train_test.prototxt\"\n"
                        << "base_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" max_iter: 300 random_seed: 1\n";
  CmdResult t = run_cmd("train --solver " + solver + " --out " + run);
  ASSERT_EQ(t.code, 0) << t.output;
  DeployOptions o;
  o.model = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";
  o.weights = run + "/snapshots/iter_300.safetensors";
  DeployResult r = deploy(o);
  Bundle fp32 = r.bundle, int8 = fp32;
  CalibrationTable table = calibrate(fp32, "lenet", "", 5, "entropy", 2);
  Int8Plan plan = quantize_int8(int8, table);
  EXPECT_EQ(plan.quantized, 4);     // conv1, conv2, ip1, ip2 (deploy's timing may send some back)
  EXPECT_EQ(plan.int8_outputs, 3);  // conv1 -> pool1 -> conv2 -> pool2 -> ip1 -> ip2 stay int8
  InferenceSession a(fp32, "fp32", 2), b(int8, "int8", 2);
  EXPECT_NE(b.net().describe().find("int8"), std::string::npos) << b.net().describe();
  // Real test images, from the training graph's TEST data layer.
  KeptNet kept(o.model);
  Net& data = *kept.net;
  int agree = 0, total = 0;
  for (int step = 0; step < 10; ++step) {
    data.forward(step);
    a.value(a.inputs()[0]).copy_from(data.value("data"));
    b.value(b.inputs()[0]).copy_from(data.value("data"));
    a.run();
    b.run();
    const Tensor &pa = a.value(a.outputs()[0]), &pb = b.value(b.outputs()[0]);
    for (int64_t i = 0; i < pa.dim(0); ++i, ++total) {
      const float *x = pa.f32() + i * 10, *y = pb.f32() + i * 10;
      agree += std::max_element(x, x + 10) - x == std::max_element(y, y + 10) - y;
    }
  }
  EXPECT_GE(agree, total * 99 / 100) << agree << " of " << total;
  // Without a calibration table there is nothing to quantize with.
  CmdResult c = run_cmd("deploy --model " + o.model + " --weights " + o.weights + " -o " + temp_path("x.bks") +
                        " --precision int8");
  EXPECT_EQ(c.code, 2) << c.output;
}

}  // namespace
}  // namespace bks::test

namespace bks::test {
namespace {

// The largest difference between the outputs of an FP32 session and an INT8 one on the same
// random input in [0, 1), relative to the FP32 output's largest magnitude.
double int8_relative_error(InferenceSession& a, InferenceSession& b) {
  OutputGap g = output_gap(a, b, 0.f, 1.f, 3);
  return g.worst / g.scale;
}

// A chain where every kind of int8 hand-over occurs: u8 after a fused ReLU (through a MAX
// pooling), s8 without one, into a convolution and into an inner product.
const char* kInt8Chain = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'pool1' type: 'Pooling' bottom: 'conv1' top: 'pool1' pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: 'conv2' type: 'Convolution' bottom: 'pool1' top: 'conv2' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'conv3' type: 'Convolution' bottom: 'conv2' top: 'conv3' convolution_param { num_output: 16 kernel_size: 1 } }
layer { name: 'relu3' type: 'ReLU' bottom: 'conv3' top: 'conv3' }
layer { name: 'ip' type: 'InnerProduct' bottom: 'conv3' top: 'ip' inner_product_param { num_output: 10 } }
)";

// deploy() given int8 quantizes (calibration and quantization are its passes), and says so
// in its reports; given int8 without a calibration source it refuses.
TEST(DeployInt8, DeployOwnsCalibrationAndQuantization) {
  DeployOptions o = write_model("int8_owned", input_layer("data", {4, 8, 12, 12}) + kInt8Chain);
  o.precision = Precision::int8;
  o.int8_where_faster = false;  // every calibrated layer: the counts below do not depend on timing
  EXPECT_THROW(deploy(o), InputError);
  o.calibration.dataset = "random";
  o.calibration.batches = 4;
  o.calibration.method = "minmax";
  DeployResult r = deploy(o);
  EXPECT_EQ(r.bundle.info.at("precision"), "int8");
  ASSERT_TRUE(r.calibration.has_value());
  EXPECT_EQ(r.int8.quantized, 4);
  EXPECT_EQ(r.int8.int8_outputs, 3);
  int with_threshold = 0;
  for (const Node& n : r.bundle.graph.nodes) {
    with_threshold += n.deploy.int8_input_threshold > 0.f;
    EXPECT_EQ(n.deploy.precision == Precision::int8, n.deploy.int8_input_threshold > 0.f) << n.name;
  }
  EXPECT_EQ(with_threshold, 4);
  std::vector<std::string> passes;
  for (const auto& rep : r.reports) passes.push_back(rep.pass);
  EXPECT_NE(std::find(passes.begin(), passes.end(), "calibrate"), passes.end());
  EXPECT_NE(std::find(passes.begin(), passes.end(), "quantize-int8"), passes.end());
  EXPECT_NE(r.kernels.find("s8 output"), std::string::npos) << r.kernels;
  // The same table quantizes the same way by hand.
  o.precision = Precision::fp32;
  o.calibration = {};
  Bundle by_hand = deploy(o).bundle;
  quantize_int8(by_hand, *r.calibration);
  ASSERT_EQ(by_hand.graph.nodes.size(), r.bundle.graph.nodes.size());
  for (size_t i = 0; i < by_hand.graph.nodes.size(); ++i)
    EXPECT_FLOAT_EQ(by_hand.graph.nodes[i].deploy.int8_output_threshold,
                    r.bundle.graph.nodes[i].deploy.int8_output_threshold);
}

// A net deployed in FP32, calibrated (min-max, 4 random batches) and quantized by hand.
struct QuantizedNet {
  DeployResult r;
  Bundle fp32, int8;
  CalibrationTable table;
  Int8Plan plan;
};
QuantizedNet quantized_net(const std::string& name, const std::vector<int>& input, const std::string& layers) {
  QuantizedNet q;
  q.r = deploy(write_model(name, input_layer("data", input) + layers));
  q.fp32 = q.int8 = q.r.bundle;
  q.table = calibrate(q.fp32, name, "random", 4, "minmax", 2);
  q.plan = quantize_int8(q.int8, q.table);
  return q;
}

TEST(DeployInt8, Int8StaysBetweenInt8LayersAndMatchesFp32) {
  QuantizedNet q = quantized_net("int8_chain", {4, 8, 12, 12}, kInt8Chain);
  const Int8Plan& plan = q.plan;
  Bundle &fp32 = q.fp32, &int8 = q.int8;
  CalibrationTable& table = q.table;
  EXPECT_EQ(plan.quantized, 4);
  EXPECT_EQ(plan.int8_outputs, 3);  // conv1 (u8), conv2 (s8), conv3 (u8); ip writes f32
  std::map<std::string, float> out;
  for (const Node& n : int8.graph.nodes) out[n.name] = n.deploy.int8_output_threshold;
  EXPECT_FLOAT_EQ(out["conv1"], table.threshold["pool1"]);  // through the pooling, conv2's threshold
  EXPECT_FLOAT_EQ(out["conv2"], table.threshold["conv2"]);
  EXPECT_FLOAT_EQ(out["ip"], 0.f);
  InferenceSession a(fp32, "fp32", 2), b(int8, "int8", 2);
  std::string d = b.net().describe();
  EXPECT_NE(d.find("u8 output"), std::string::npos) << d;
  EXPECT_NE(d.find("s8 output"), std::string::npos) << d;
  EXPECT_LE(int8_relative_error(a, b), 0.05);
}

// Average poolings read int8: a padded window with Caffe's divisor over a u8 input (after
// a fused ReLU), and a global one over an s8 input. Their writers write int8 with the
// poolings' inputs' calibrated ranges, and the poolings dequantize their means.
TEST(DeployInt8, AveragePoolingsReadInt8AndMatchFp32) {
  const char* layers = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'pool1' type: 'Pooling' bottom: 'conv1' top: 'pool1' pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: 'conv2' type: 'Convolution' bottom: 'pool1' top: 'conv2' convolution_param { num_output: 32 kernel_size: 3 pad: 1 } }
layer { name: 'pool2' type: 'Pooling' bottom: 'conv2' top: 'pool2' pooling_param { pool: AVE global_pooling: true } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'pool2' top: 'ip' inner_product_param { num_output: 10 } }
)";
  QuantizedNet q = quantized_net("int8_average", {4, 8, 12, 12}, layers);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : q.int8.graph.nodes) by_name[n.name] = &n;
  ASSERT_TRUE(by_name.count("pool1") && by_name.count("pool2") && by_name.count("conv1") && by_name.count("conv2"));
  EXPECT_EQ(q.plan.int8_outputs, 2);  // conv1 (u8) and conv2 (s8)
  for (const char* conv : {"conv1", "conv2"}) {
    ASSERT_GT(q.table.threshold.count(conv), 0u) << conv;  // calibrated: a pooling's input
    EXPECT_FLOAT_EQ(by_name[conv]->deploy.int8_output_threshold, q.table.threshold.at(conv)) << conv;
  }
  EXPECT_FLOAT_EQ(by_name["pool1"]->deploy.int8_input_threshold, q.table.threshold.at("conv1"));
  EXPECT_FLOAT_EQ(by_name["pool2"]->deploy.int8_input_threshold, q.table.threshold.at("conv2"));
  InferenceSession a(q.fp32, "fp32", 2), b(q.int8, "int8", 2);
  EXPECT_LE(int8_relative_error(a, b), 0.05);
  const std::string d = b.net().describe();
  EXPECT_NE(d.find("channels-last average (u8 in"), std::string::npos) << d;
  EXPECT_NE(d.find("channels-last average (s8 in"), std::string::npos) << d;
  // An average pooling told a threshold takes it at inference only.
  Bundle bad = q.int8;
  for (Node& n : bad.graph.nodes)
    if (n.name == "pool1") n.deploy.int8_input_threshold = -1.f;
  EXPECT_THROW(InferenceSession(bad, "bad", 1), InputError);
}

// A bundle whose average poolings read int8 says so in its header (format 5), so a reader
// that lacks that refuses it instead of averaging the levels as floats; one that needs
// nothing new stays in the format older readers read. Both layouts (plain tensors and the
// packed coded ones) read back the same values.
TEST(DeployBundle, BundlesNameWhatTheyNeedAndReadersRefuseWhatTheyLack) {
  const char* layers = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'pool1' type: 'Pooling' bottom: 'conv1' top: 'pool1' pooling_param { pool: AVE global_pooling: true } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'pool1' top: 'ip' inner_product_param { num_output: 10 } }
)";
  QuantizedNet q = quantized_net("bundle_needs", {2, 8, 6, 6}, layers);
  EXPECT_TRUE(bundle_requirements(q.fp32.graph).empty());
  EXPECT_EQ(bundle_requirements(q.int8.graph), std::vector<std::string>{"int8_average_pooling"});

  const std::string plain = temp_path("needs_nothing.bks");
  save_bundle(plain, q.fp32);
  const std::string plain_bytes = read_file(plain, "bundle");
  EXPECT_NE(plain_bytes.find("\"bakusoku_bundle_version\":\"2\""), std::string::npos);
  EXPECT_EQ(plain_bytes.find("bakusoku_requires"), std::string::npos);

  Bundle coded = q.int8;
  const std::string ip = "ip.0";
  ASSERT_TRUE(coded.weights.count(ip));
  const std::string ip_bytes = encode_weights(coded.weights.at(ip)).bytes;
  coded.coded[ip] = Tensor({static_cast<int64_t>(ip_bytes.size())}, DType::u8);
  std::copy(ip_bytes.begin(), ip_bytes.end(), coded.coded[ip].data<char>());
  InferenceSession want(q.int8, "int8", 1);
  for (const Bundle* b : {&q.int8, &coded}) {
    const std::string path = temp_path(b == &coded ? "needs_coded.bks" : "needs_plain.bks");
    save_bundle(path, *b);
    std::string bytes = read_file(path, "bundle");
    EXPECT_NE(bytes.find("\"bakusoku_bundle_version\":\"5\""), std::string::npos) << path;
    const size_t at = bytes.find("\"bakusoku_requires\":\"int8_average_pooling\"");
    ASSERT_NE(at, std::string::npos) << path;
    Bundle back = load_bundle(path);
    EXPECT_EQ(back.coded.size(), b->coded.size()) << path;
    EXPECT_EQ(back.info.count("bakusoku_requires"), 0u) << path;
    InferenceSession got(back, path, 1);
    EXPECT_EQ(int8_relative_error(want, got), 0.0) << path;
    // A requirement this reader does not know: one error naming it.
    bytes.replace(bytes.find("int8_average_pooling", at), 20, "int8_average_poolinz");
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      load_bundle(path);
      ADD_FAILURE() << path << ": an unknown requirement was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("needs 'int8_average_poolinz'"), std::string::npos) << e.what();
    }
  }
}

// Two residual blocks as ResNet's: an identity shortcut (the block adds its u8 input) and
// a projection (the 1x1 shortcut convolution, computed last, adds the s8 output of the
// block's last convolution, read by nothing else).
const char* kResidualBlocks = R"(
layer { name: 'stem' type: 'Convolution' bottom: 'data' top: 'stem' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'stem_relu' type: 'ReLU' bottom: 'stem' top: 'stem' }
layer { name: 'a1' type: 'Convolution' bottom: 'stem' top: 'a1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'a1_relu' type: 'ReLU' bottom: 'a1' top: 'a1' }
layer { name: 'a2' type: 'Convolution' bottom: 'a1' top: 'a2' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'sum_a' type: 'Eltwise' bottom: 'stem' bottom: 'a2' top: 'sum_a' }
layer { name: 'sum_a_relu' type: 'ReLU' bottom: 'sum_a' top: 'sum_a' }
layer { name: 'b1' type: 'Convolution' bottom: 'sum_a' top: 'b1' convolution_param { num_output: 32 kernel_size: 1 } }
layer { name: 'b1_relu' type: 'ReLU' bottom: 'b1' top: 'b1' }
layer { name: 'b2' type: 'Convolution' bottom: 'b1' top: 'b2' convolution_param { num_output: 32 kernel_size: 3 pad: 1 } }
layer { name: 'proj' type: 'Convolution' bottom: 'sum_a' top: 'proj' convolution_param { num_output: 32 kernel_size: 1 } }
layer { name: 'sum_b' type: 'Eltwise' bottom: 'b2' bottom: 'proj' top: 'sum_b' }
layer { name: 'sum_b_relu' type: 'ReLU' bottom: 'sum_b' top: 'sum_b' }
layer { name: 'c' type: 'Convolution' bottom: 'sum_b' top: 'c' convolution_param { num_output: 8 kernel_size: 1 } }
)";

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The residual stream stays int8: each block's fused sum writes int8 into the buffer of the
// residual it adds (a oneDNN sum post-op, rescaled from the residual's threshold, s8 read
// under a u8 output included), and the result matches FP32, where the sums are written into
// the residuals' buffers too and match the unfused graph.
TEST(DeployInt8, ResidualStreamStaysInt8AndMatchesFp32) {
  QuantizedNet q = quantized_net("int8_residual", {2, 8, 10, 10}, kResidualBlocks);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : q.int8.graph.nodes) by_name[n.name] = &n;
  ASSERT_TRUE(by_name.count("a2") && by_name.count("proj"));
  ASSERT_TRUE(by_name["a2"]->deploy.fusion.residual_sum && by_name["proj"]->deploy.fusion.residual_sum);
  for (const char* sum : {"a2", "proj"}) {
    EXPECT_GT(by_name[sum]->deploy.int8_output_threshold, 0.f) << sum;
    EXPECT_GT(by_name[sum]->deploy.int8_residual_threshold, 0.f) << sum;
  }
  EXPECT_FLOAT_EQ(by_name["a2"]->deploy.int8_residual_threshold, by_name["stem"]->deploy.int8_output_threshold);
  EXPECT_FLOAT_EQ(by_name["proj"]->deploy.int8_residual_threshold, q.table.threshold.at("b2"));
  InferenceSession a(q.fp32, "fp32", 2), b(q.int8, "int8", 2);
  EXPECT_LE(int8_relative_error(a, b), 0.05);
  const std::string da = a.net().describe(), db = b.net().describe();  // int8 kernels are built by now
  EXPECT_EQ(occurrences(da, "added onto"), 2u) << da;
  EXPECT_EQ(occurrences(db, "added onto"), 2u) << db;
  EXPECT_EQ(occurrences(db, "fused +sum +relu"), 2u) << db;
  DeployOptions o = write_model("residual_fp32", input_layer("data", {2, 8, 10, 10}) + kResidualBlocks);
  DeployModel m = load_deploy_model(o);
  run_deploy_passes(m);
  EXPECT_LE(logits_difference(o, m, "c"), 1e-4);
}

// A batch run in parts (micro batches) computes what the whole batch does: the session's
// inputs and outputs hold every item, each forward computes m of them. The bundle's
// recorded part size is used unless the session is told otherwise; a part size that does
// not divide the batch runs it whole; a corrupt entry is a clear error. Deploy records a
// part size only when it divides the batch.
TEST(DeploySession, BatchInPartsComputesTheWholeBatch) {
  DeployOptions o = write_model("micro", input_layer("data", {6, 8, 10, 10}) + kResidualBlocks);
  DeployResult r = deploy(o);
  ASSERT_EQ(r.batch, 6);
  EXPECT_NE(r.micro_batch_table.find("chosen"), std::string::npos) << r.micro_batch_table;
  // Timed: the whole batch and the parts that divide it (4 does not).
  std::vector<int> timed;
  std::istringstream rows(r.micro_batch_table);
  for (std::string line; std::getline(rows, line);)
    if (int items = 0; line.find(" ms") != std::string::npos && std::sscanf(line.c_str(), "%d", &items) == 1)
      timed.push_back(items);
  EXPECT_EQ(timed, (std::vector<int>{6, 1, 2})) << r.micro_batch_table;
  if (auto it = r.bundle.info.find("micro_batch"); it != r.bundle.info.end()) {
    EXPECT_EQ(6 % std::stoi(it->second), 0) << it->second;
  }
  Bundle b = r.bundle;
  b.info.erase("micro_batch");
  InferenceSession whole(b, "whole", 2), parts(b, "parts", 2, 0, 2);
  EXPECT_EQ(whole.micro_batch(), 6);
  EXPECT_EQ(parts.micro_batch(), 2);
  EXPECT_EQ(parts.batch(), 6);
  EXPECT_EQ(parts.value(parts.inputs()[0]).shape(), (Shape{6, 8, 10, 10}));
  EXPECT_EQ(parts.net().value(parts.inputs()[0]).shape(), (Shape{2, 8, 10, 10}));
  OutputGap g = output_gap(whole, parts, -1.f, 1.f, 5);
  EXPECT_LE(g.worst / g.scale, 1e-5);
  b.info["micro_batch"] = "2";
  EXPECT_EQ(InferenceSession(b, "recorded", 2).micro_batch(), 2);
  EXPECT_EQ(InferenceSession(b, "told whole", 2, 0, 0).micro_batch(), 6);
  EXPECT_EQ(InferenceSession(b, "odd batch", 2, 3).micro_batch(), 3);
  b.info["micro_batch"] = "4";  // recorded, but it does not divide the batch: whole
  EXPECT_EQ(InferenceSession(b, "non-divisor", 2).micro_batch(), 6);
  for (const char* bad : {"two", "0", "-2", "99999999999"}) {
    b.info["micro_batch"] = bad;
    EXPECT_THROW(InferenceSession(b, "corrupt", 2), InputError) << bad;
  }
}

// A batch can run in parts through one node and the rest of the graph once on the whole
// batch: the graph is cut where one value alone crosses, the tail is handed that value
// item by item, and the outputs are the whole batch's. The bundle records the node; one it
// cannot be cut after is a clear error, in a session and after a save and load.
TEST(DeploySession, PartsThroughANodeThenTheRestWhole) {
  DeployOptions o = write_model("cut", input_layer("data", {6, 8, 10, 10}) + kResidualBlocks);
  Bundle b = deploy(o).bundle;
  b.info.erase("micro_batch");
  b.info.erase(kPartsUntilKey);
  const Graph& g = b.graph;
  auto index = [&](const std::string& name) {
    const Node* n = g.find_node(name);
    EXPECT_NE(n, nullptr) << name;
    return n ? static_cast<int>(n - g.nodes.data()) : -1;
  };
  const int a2 = index("a2"), b1 = index("b1"), last = static_cast<int>(g.nodes.size()) - 1;
  std::optional<GraphCut> cut = cut_graph_after(g, a2);  // the residual stream alone crosses
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->head.nodes.size(), static_cast<size_t>(a2 + 1));
  EXPECT_EQ(cut->head.outputs().size(), 1u);
  EXPECT_EQ(cut->tail.nodes.size(), g.nodes.size() - static_cast<size_t>(a2));  // its Input, then the rest
  EXPECT_FALSE(cut_graph_after(g, b1));                                         // b1's output and the stream both cross
  EXPECT_FALSE(cut_graph_after(g, last));
  EXPECT_FALSE(cut_graph_after(g, -1));

  InferenceSession whole(b, "whole", 2, 0, 0), parts(b, "parts", 2, 0, 2, ""), split(b, "cut", 2, 0, 2, "a2");
  EXPECT_EQ(parts.tail(), nullptr);
  ASSERT_NE(split.tail(), nullptr);
  EXPECT_EQ(split.net().value(split.inputs()[0]).shape().at(0), 2);
  EXPECT_EQ(split.tail()->value(split.tail()->inputs()[0]).shape().at(0), 6);
  EXPECT_EQ(split.value(split.outputs()[0]).shape().at(0), 6);
  EXPECT_EQ(split.value_name(split.outputs()[0]), whole.value_name(whole.outputs()[0]));
  OutputGap gap = output_gap(whole, split, -1.f, 1.f, 5);
  EXPECT_LE(gap.worst / gap.scale, 1e-5);
  EXPECT_GT(gap.scale, 0.0);
  EXPECT_EQ(time_nodes(split, 1).size(), g.nodes.size());  // every node timed once
  {  // blocked activations: the head's output, the handed value, is still written plain
    Bundle blocked = b;
    blocked.info[kActivationLayoutKey] = kBlockedLayout;
    InferenceSession in_blocks(blocked, "blocked cut", 2, 0, 2, "a2");
    gap = output_gap(whole, in_blocks, -1.f, 1.f, 5);
    EXPECT_LE(gap.worst / gap.scale, 1e-5);
  }

  b.info["micro_batch"] = "2";
  b.info[kPartsUntilKey] = "a2";
  const std::string path = temp_path("cut.bks");
  save_bundle(path, b);
  InferenceSession loaded(load_bundle(path), path, 2);
  ASSERT_NE(loaded.tail(), nullptr);
  gap = output_gap(whole, loaded, -1.f, 1.f, 6);
  EXPECT_LE(gap.worst / gap.scale, 1e-5);
  EXPECT_EQ(InferenceSession(b, "told whole", 2, 0, 0).tail(), nullptr);
  for (const std::string& bad : {std::string("b1"), std::string("no such layer"), g.nodes.back().name}) {
    b.info[kPartsUntilKey] = bad;
    try {
      InferenceSession s(b, "corrupt", 2);
      ADD_FAILURE() << bad << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("micro_batch_until '" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

// The gap bench --compare prints and batch tuning bounds: relative to the first session's
// largest output value; NaN stays NaN; outputs of another shape are infinitely far.
TEST(DeploySession, MaxRelativeDifferenceOfOutputs) {
  DeployOptions o = write_model("gap", input_layer("data", {2, 8, 10, 10}) + kResidualBlocks);
  Bundle b = deploy(o).bundle;
  InferenceSession x(b, "x", 2), y(b, "y", 2), three(b, "three", 2, 3);
  for (InferenceSession* s : {&x, &y, &three}) {
    fill_timing_inputs(*s, 3);
    s->run();
  }
  EXPECT_EQ(max_relative_difference(x, y), 0.0);
  Tensor& out = y.value(y.outputs()[0]);
  float largest = 0;
  for (int64_t i = 0; i < out.numel(); ++i) largest = std::max(largest, std::fabs(out.f32()[i]));
  ASSERT_GT(largest, 0.f);
  out.f32()[1] += 0.25f * largest;
  EXPECT_NEAR(max_relative_difference(x, y), 0.25, 1e-6);
  out.f32()[2] = NAN;
  EXPECT_TRUE(std::isnan(max_relative_difference(x, y)));
  EXPECT_EQ(max_relative_difference(x, three), INFINITY);
}

// A net whose axis 0 is time for attention and positions never runs in parts: each part
// would attend only within itself and count its positions from 0. Deploy times it on 0/1
// inputs, which its Embed takes as indices.
TEST(DeploySession, AttentionAndPositionsRunTheBatchWhole) {
  const std::string layers = R"(
layer { name: "emb" type: "Embed" bottom: "data" top: "e" embed_param { num_output: 8 input_dim: 5 } }
layer { name: "pos" type: "PositionalEncoding" bottom: "e" top: "p" positional_encoding_param { max_length: 6 } }
layer { name: "att" type: "MultiHeadAttention" bottom: "p" top: "a" attention_param { num_heads: 2 causal: true } }
)";
  DeployOptions o = write_model("attention_whole", input_layer("data", {6, 2}) + layers);
  DeployResult r = deploy(o);
  EXPECT_EQ(r.bundle.info.count("micro_batch"), 0u) << r.micro_batch_table;
  EXPECT_EQ(InferenceSession(r.bundle, "told parts", 2, 0, 2).micro_batch(), 6) << "parts of 2 timesteps";
}

// Grouped and depthwise convolutions (MobileNet's) quantize too: their weights are scaled per
// output channel across the groups.
TEST(DeployInt8, GroupedAndDepthwiseConvolutionsMatchFp32) {
  const char* net = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'dw' type: 'Convolution' bottom: 'conv1' top: 'dw' convolution_param { num_output: 16 group: 16 kernel_size: 3 pad: 1 } }
layer { name: 'relu2' type: 'ReLU' bottom: 'dw' top: 'dw' }
layer { name: 'grouped' type: 'Convolution' bottom: 'dw' top: 'grouped' convolution_param { num_output: 32 group: 4 kernel_size: 1 } }
)";
  QuantizedNet q = quantized_net("int8_grouped", {2, 8, 10, 10}, net);
  const Bundle& int8 = q.int8;
  EXPECT_EQ(q.plan.quantized, 3);
  InferenceSession a(q.fp32, "fp32", 2), b(int8, "int8", 2);
  std::string d = b.net().describe();
  EXPECT_EQ(std::count_if(int8.graph.nodes.begin(), int8.graph.nodes.end(),
                          [](const Node& n) { return n.deploy.precision == Precision::int8; }),
            3);
  EXPECT_LE(int8_relative_error(a, b), 0.05) << d;
}

// ReLU6 fused into INT8 convolutions bounds the outputs in real units, not in the int8
// levels the kernels compute in: MobileNet v2's blocks match FP32.
TEST(DeployInt8, BoundedReluMatchesFp32) {
  const char* net = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: 'gaussian' std: 1.5 } } }
layer { name: 'relu1' type: 'ReLU6' bottom: 'conv1' top: 'conv1' }
layer { name: 'dw' type: 'Convolution' bottom: 'conv1' top: 'dw' convolution_param { num_output: 16 group: 16 kernel_size: 3 pad: 1 weight_filler { type: 'gaussian' std: 0.5 } } }
layer { name: 'relu2' type: 'ReLU6' bottom: 'dw' top: 'dw' }
layer { name: 'pw' type: 'Convolution' bottom: 'dw' top: 'pw' convolution_param { num_output: 8 kernel_size: 1 } }
)";
  QuantizedNet q = quantized_net("int8_relu6", {2, 8, 10, 10}, net);
  int bounded = 0;
  for (const Node& n : q.int8.graph.nodes) bounded += n.deploy.fusion.bounded();
  EXPECT_EQ(bounded, 2);
  InferenceSession a(q.fp32, "fp32", 2), b(q.int8, "int8", 2);
  EXPECT_LE(int8_relative_error(a, b), 0.05) << b.net().describe();
}

// bakusoku's INT8 depthwise kernel (dw_conv_int8.h) computes what oneDNN's does, bit for bit,
// from the same rounded weights, bias and scales; deploy's choice of it is saved and taken.
TEST(DeployInt8, OwnDepthwiseKernelMatchesOneDnnExactly) {
  if (!DwInt8Conv::cpu_supported()) {
    GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  }
  const char* net = R"(
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' convolution_param { num_output: 24 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'dw' type: 'Convolution' bottom: 'conv1' top: 'dw' convolution_param { num_output: 24 group: 24 kernel_size: 3 pad: 1 stride: 2 } }
layer { name: 'relu2' type: 'ReLU' bottom: 'dw' top: 'dw' }
layer { name: 'pw' type: 'Convolution' bottom: 'dw' top: 'pw' convolution_param { num_output: 16 kernel_size: 1 } }
)";
  QuantizedNet q = quantized_net("int8_own_dw", {3, 8, 19, 21}, net);
  Bundle own = q.int8, theirs = q.int8;
  for (Bundle* b : {&own, &theirs})
    for (Node& n : b->graph.nodes)
      if (n.name == "dw") n.deploy.kernel = b == &own ? "dw_int8" : "direct";
  InferenceSession a(theirs, "oneDNN", 2), b(own, "own", 2);
  OutputGap g = output_gap(a, b, 0.f, 1.f, 3);
  const std::string d = b.net().describe();
  EXPECT_NE(d.find("bakusoku dw_3x3_vnni (as deploy chose) int8 (u8 in"), std::string::npos) << d;
  EXPECT_EQ(a.net().describe().find("dw_3x3_vnni"), std::string::npos) << a.net().describe();
  EXPECT_GT(g.scale, 1e-6);
  EXPECT_EQ(g.worst, 0.0) << "of " << g.scale;
}

// A layer measured slower in INT8 goes back to FP32; the layer before it, which wrote int8
// for it, then writes f32, and the graph still runs and matches FP32.
TEST(DeployInt8, LayersSlowerInInt8GoBackToFp32) {
  QuantizedNet q = quantized_net("int8_faster", {4, 8, 12, 12}, kInt8Chain);
  Int8Plan& plan = q.plan;
  Bundle &fp32 = q.fp32, &int8 = q.int8;
  ASSERT_EQ(plan.quantized, 4);
  auto index = [&](const std::string& name) {
    for (size_t k = 0; k < int8.graph.nodes.size(); ++k)
      if (int8.graph.nodes[k].name == name) return k;
    ADD_FAILURE() << "no node " << name;
    return size_t{0};
  };
  std::vector<double> fp32_ms(int8.graph.nodes.size(), 1.0), int8_ms = fp32_ms;
  int8_ms[index("conv1")] = 1.04;  // within 5%: stays int8
  int8_ms[index("conv2")] = 1.2;
  int8_ms[index("ip")] = 0.5;
  EXPECT_GT(int8.graph.nodes[index("conv1")].deploy.int8_output_threshold, 0.f);
  std::vector<std::string> back = keep_int8_where_faster(int8.graph, fp32_ms, int8_ms, plan);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_NE(back[0].find("conv2"), std::string::npos) << back[0];
  EXPECT_EQ(plan.quantized, 3);
  EXPECT_EQ(plan.timed, 4);
  const Node& conv2 = int8.graph.nodes[index("conv2")];
  EXPECT_EQ(conv2.deploy.precision, Precision::fp32);
  EXPECT_EQ(conv2.deploy.int8_input_threshold, 0.f);
  EXPECT_EQ(int8.graph.nodes[index("conv1")].deploy.precision, Precision::int8);
  EXPECT_EQ(int8.graph.nodes[index("conv1")].deploy.int8_output_threshold, 0.f);  // conv2 reads f32 now
  EXPECT_EQ(plan.int8_outputs, 1);  // conv3 (u8) into ip
  InferenceSession a(fp32, "fp32", 2), b(int8, "int8", 2);
  EXPECT_LE(int8_relative_error(a, b), 0.05);
}

// deploy() measures each quantized layer both ways and reports what it sent back.
TEST(DeployInt8, DeployKeepsInt8WhereFaster) {
  DeployOptions o = write_model("int8_where_faster", input_layer("data", {4, 8, 12, 12}) + kInt8Chain);
  o.precision = Precision::int8;
  o.calibration.dataset = "random";
  o.calibration.batches = 2;
  DeployResult r = deploy(o);
  auto rep = std::find_if(r.reports.begin(), r.reports.end(),
                          [](const PassReport& p) { return p.pass == "keep-int8-where-faster"; });
  ASSERT_NE(rep, r.reports.end());
  int int8_nodes = 0;
  for (const Node& n : r.bundle.graph.nodes) int8_nodes += n.deploy.precision == Precision::int8;
  EXPECT_EQ(int8_nodes, r.int8.quantized);
  EXPECT_EQ(r.int8.timed, 4);  // every quantized layer measured both ways
  EXPECT_EQ(r.int8.quantized + static_cast<int>(rep->changes.size()), 4);
}

// Where int8 must not be kept: a reader that takes f32 only, an AVE pooling whose input has
// no calibrated range, readers with different thresholds, a net output, and a fused residual
// sum.
TEST(DeployInt8, Int8IsNotKeptWhereAReaderNeedsF32) {
  // Convolutions named by their input threshold ("a=1" reads with threshold 1).
  auto net = [](const std::string& text, const std::map<std::string, float>& thresholds) {
    std::string path = temp_path("int8_keep.prototxt");
    std::ofstream(path) << input_layer("data", {1, 4, 2, 2}) + text;
    proto::NetState st;
    st.set_phase(proto::TEST);
    Graph g = build_caffe_graph(load_net_file(path), st);
    for (Node& n : g.nodes)
      if (thresholds.count(n.name)) n.deploy.int8_input_threshold = thresholds.at(n.name);
    return g;
  };
  auto conv = [](const std::string& name, const std::string& bottom) {
    return "layer { name: '" + name + "' type: 'Convolution' bottom: '" + bottom + "' top: '" + name +
           "' convolution_param { num_output: 4 kernel_size: 1 } }\n";
  };
  auto outputs = [](const Graph& g) {
    std::vector<std::string> v;
    for (const Node& n : g.nodes)
      if (n.deploy.int8_output_threshold > 0.f) v.push_back(n.name);
    return v;
  };
  using V = std::vector<std::string>;
  Graph g = net(conv("a", "data") + conv("b", "a") + conv("c", "b"), {{"a", 1}, {"b", 2}, {"c", 3}});
  EXPECT_EQ(keep_int8_between_layers(g), 2);
  EXPECT_EQ(outputs(g), (V{"a", "b"}));  // c is the net's output
  g = net(conv("a", "data") + "layer { name: 'r' type: 'ReLU' bottom: 'a' top: 'r' }\n" + conv("b", "r"),
          {{"a", 1}, {"b", 2}});
  EXPECT_EQ(keep_int8_between_layers(g), 0);
  g = net(conv("a", "data") +
              "layer { name: 'p' type: 'Pooling' bottom: 'a' top: 'p' pooling_param { pool: AVE kernel_size: 2 } }\n" +
              conv("b", "p"),
          {{"a", 1}, {"b", 2}});
  EXPECT_EQ(keep_int8_between_layers(g), 0);
  EXPECT_EQ(g.nodes[2].deploy.int8_input_threshold, 0.f);
  EXPECT_EQ(keep_int8_between_layers(g, {{"a", 4.f}}), 1);  // with a's range the pooling reads it int8
  EXPECT_FLOAT_EQ(g.nodes[1].deploy.int8_output_threshold, 4.f);
  EXPECT_FLOAT_EQ(g.nodes[2].deploy.int8_input_threshold, 4.f);
  g = net(conv("a", "data") +
              "layer { name: 'p' type: 'Pooling' bottom: 'a' top: 'p' pooling_param { pool: MAX kernel_size: 2 } }\n" +
              conv("b", "p"),
          {{"a", 1}, {"b", 2}});
  EXPECT_EQ(outputs(g), V{});
  keep_int8_between_layers(g);
  EXPECT_EQ(outputs(g), (V{"a"}));  // through the MAX pooling, with b's threshold
  EXPECT_FLOAT_EQ(g.nodes[1].deploy.int8_output_threshold, 2.f);
  g = net(conv("a", "data") + conv("b", "a") + conv("b2", "a") + conv("c", "b") + conv("c2", "b2"),
          {{"a", 1}, {"b", 2}, {"b2", 3}, {"c", 1}, {"c2", 1}});
  keep_int8_between_layers(g);
  EXPECT_EQ(outputs(g), (V{"b", "b2"}));  // a's readers disagree (2 vs 3)
  // Fused residual sums (node k reads `residual` as its second input).
  auto add_residual = [](Graph& g, int k, const std::string& residual) {
    g.nodes[k].deploy.fusion.residual_sum = true;
    g.nodes[k].inputs.push_back(g.find_value(residual));
    relink(g);
  };
  g = net(conv("a", "data") + conv("b", "a") + conv("c", "b"), {{"a", 1}, {"b", 2}, {"c", 1}});
  add_residual(g, 2, "data");
  keep_int8_between_layers(g);
  EXPECT_EQ(outputs(g), (V{"a", "b"}));  // b adds an f32 residual and still writes int8 for c
  EXPECT_EQ(g.nodes[2].deploy.int8_residual_threshold, 0.f);
  g = net(conv("a", "data") + conv("b", "a") + conv("c", "b"), {{"a", 1}, {"b", 2}, {"c", 3}});
  add_residual(g, 3, "a");
  keep_int8_between_layers(g);
  EXPECT_EQ(outputs(g), (V{"a", "b"}));                             // c takes a at b's threshold ...
  EXPECT_FLOAT_EQ(g.nodes[3].deploy.int8_residual_threshold, 2.f);  // ... and is told it
  // A value read only as a residual: int8 at its calibrated range, f32 without one.
  g = net(conv("a", "data") + conv("b", "data") + conv("c", "b"), {{"a", 1}, {"b", 1}, {"c", 2}});
  add_residual(g, 3, "a");
  keep_int8_between_layers(g);
  EXPECT_EQ(outputs(g), (V{"b"}));
  EXPECT_EQ(g.nodes[3].deploy.int8_residual_threshold, 0.f);
  keep_int8_between_layers(g, {{"a", 5.f}});
  EXPECT_EQ(outputs(g), (V{"a", "b"}));
  EXPECT_FLOAT_EQ(g.nodes[3].deploy.int8_residual_threshold, 5.f);
  // An f32 reader besides the residual one keeps it f32.
  g = net(
      conv("a", "data") + conv("b", "a") + conv("c", "b") + "layer { name: 'r' type: 'ReLU' bottom: 'a' top: 'r' }\n",
      {{"a", 1}, {"b", 2}, {"c", 3}});
  add_residual(g, 3, "a");
  keep_int8_between_layers(g, {{"a", 5.f}});
  EXPECT_EQ(outputs(g), (V{"b"}));
  EXPECT_EQ(g.nodes[3].deploy.int8_residual_threshold, 0.f);
}

// A crafted net with a long chain of MAX poolings between int8 convolutions: the threshold
// is carried back through all of them to the first convolution, and forward to a fused
// residual reader, in one pass each (recursion through the chain exhausted the stack).
TEST(DeployInt8, Int8ThresholdsCrossALongChainOfPoolings) {
  std::string path = temp_path("int8_pool_chain.prototxt");
  std::ofstream(path) << input_layer("data", {1, 4, 2, 2}) +
                             "layer { name: 'a' type: 'Convolution' bottom: 'data' top: 'a' "
                             "convolution_param { num_output: 4 kernel_size: 1 } }\n"
                             "layer { name: 'p' type: 'Pooling' bottom: 'a' top: 'p' "
                             "pooling_param { pool: MAX kernel_size: 1 } }\n"
                             "layer { name: 'b' type: 'Convolution' bottom: 'p' top: 'b' "
                             "convolution_param { num_output: 4 kernel_size: 1 } }\n"
                             "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' "
                             "convolution_param { num_output: 4 kernel_size: 1 } }\n";
  proto::NetState st;
  st.set_phase(proto::TEST);
  Graph g = build_caffe_graph(load_net_file(path), st);
  ASSERT_EQ(g.nodes.size(), 5u);  // data, a, p, b, c
  const Node pool = g.nodes[2];
  Node b = g.nodes[3], c = g.nodes[4];
  g.nodes.resize(2);
  int last = g.find_value("a");
  for (int k = 0; k < 200000; ++k) {
    Node p = pool;
    p.name = fmt::format("p{}", k);
    p.inputs = {last};
    last = g.add_value(p.name);
    p.outputs = {last};
    g.nodes.push_back(std::move(p));
  }
  b.inputs = {last};
  c.inputs.push_back(last);  // c adds the chain's end as a fused residual
  c.deploy.fusion.residual_sum = true;
  g.nodes.push_back(b);
  g.nodes.push_back(c);
  relink(g);
  Node& a = g.nodes[1];
  a.deploy.int8_input_threshold = 1.f;
  g.nodes[g.nodes.size() - 2].deploy.int8_input_threshold = 2.f;
  g.nodes.back().deploy.int8_input_threshold = 3.f;
  EXPECT_EQ(keep_int8_between_layers(g), 1);
  EXPECT_FLOAT_EQ(a.deploy.int8_output_threshold, 2.f);  // b's, through 200,000 poolings
  EXPECT_FLOAT_EQ(g.nodes.back().deploy.int8_residual_threshold, 2.f);
}

}  // namespace
}  // namespace bks::test
