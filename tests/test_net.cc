// The executor: gradients through fan-out, in-place layers and shared weights, checked by
// finite differences on the whole net's loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/log.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "runtime/filler.h"
#include "runtime/net.h"
#include "backend/dnnl_util.h"
#include "ops/op.h"

namespace bks {
namespace {

std::unique_ptr<Net> build_net(const std::string& text, ParamStore& store, CpuBackend& backend, Phase phase,
                               const NetOptions& opt) {
  NetLoad nl;
  nl.source = "net.prototxt";
  parse_prototxt_string(text, nl.source, nl.param, &nl.layer_lines);
  proto::NetState st;
  st.set_phase(phase);
  return std::make_unique<Net>(build_caffe_graph(nl, st), phase, store, backend, 5, opt);
}

struct TestNet {
  CpuBackend backend{2};
  ParamStore store;
  std::unique_ptr<Net> net;
  explicit TestNet(const std::string& text, Phase phase = proto::TRAIN, bool reuse_buffers = true) {
    NetOptions opt;
    opt.reuse_buffers = reuse_buffers;
    net = build_net(text, store, backend, phase, opt);
    Rng rng(9);
    for (int v : net->inputs())
      for (int64_t i = 0; i < net->value(v).numel(); ++i) net->value(v).f32()[i] = rng.uniform(-1, 1);
  }
  // Numeric vs analytic gradient of the net loss for every learnable parameter.
  void check(float step = 1e-2f, float tol = 2e-2f) {
    store.clear_grads();
    net->forward();
    net->backward();
    store.zero_unwritten_grads();
    for (auto& p : store.all()) {
      if (!p.learnable) continue;
      Tensor analytic = p.grad.clone();
      for (int64_t i = 0; i < p.data.numel(); ++i) {
        float o = p.data.f32()[i];
        p.data.f32()[i] = o + step;
        double lp = net->forward();
        p.data.f32()[i] = o - step;
        double lm = net->forward();
        p.data.f32()[i] = o;
        double num = (lp - lm) / (2 * step);
        double a = analytic.f32()[i];
        ASSERT_NEAR(a, num, tol * std::max({1.0, std::fabs(a), std::fabs(num)})) << p.key << "[" << i << "]";
      }
    }
  }
};

// A first convolution over one channel (LeNet's conv1) keeps the plain source layout, for
// which oneDNN 2.6 on AVX2 has only reference loops for the weight gradient (2.9 s a step
// instead of ~3 ms): training takes the layouts oneDNN has a JIT kernel for.
TEST(Net, OneChannelConvolutionTrainsOnJitKernels) {
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 4 dim: 1 dim: 12 dim: 12 } shape { dim: 4 dim: 20 dim: 8 dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "x" top: "y" convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)");
  const std::string name = t.net->op(1).kernel_name();
  EXPECT_NE(name.find("bwd_weights"), std::string::npos) << name;
  EXPECT_EQ(name.find("ref"), std::string::npos) << name;
  t.check(1e-2f, 3e-2f);
}

// A oneDNN reference primitive any kernel builds is named in what `time` and --verbose show
// (the runtime watches prepare()). A depthwise stride-2 convolution's weight gradient is
// oneDNN 2.6's reference on AVX2; on a CPU where it is not, there is nothing to name.
TEST(Net, NamesOneDnnReferencePrimitives) {
  const char* layer =
      "name: 'dw' type: 'Convolution' convolution_param { num_output: 8 kernel_size: 4 stride: 2 pad: 1 group: 8 }";
  {
    // The kernel's own name lists oneDNN's implementations: is one of them a reference?
    CpuBackend backend(1);
    proto::LayerParameter lp;
    parse_prototxt_string(layer, "test", lp);
    Node node = caffe_layer_node(lp, "test");
    node.inputs = {0};
    node.outputs = {1};
    OpInit init{node, "test", proto::TRAIN, 1, backend};
    auto k = KernelRegistry::get().create(init);
    k->reshape({{1, 8, 12, 12}}, {{1, 8, 6, 6}});
    k->prepare({{1, 8, 12, 12}}, {{1, 8, 6, 6}});
    if (k->kernel_name().find("ref:") == std::string::npos)
      GTEST_SKIP() << "oneDNN has fast kernels for every pass of this convolution on this CPU: " << k->kernel_name();
  }
  TestNet t(fmt::format(R"(
layer {{ name: "in" type: "Input" top: "x" top: "t" input_param {{ shape {{ dim: 1 dim: 8 dim: 12 dim: 12 }} shape {{ dim: 1 dim: 8 dim: 6 dim: 6 }} }} }}
layer {{ {} bottom: "x" top: "y" }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }}
)",
                        layer));
  bool named = false;
  for (int n = 0; n < t.net->num_nodes(); ++n) {
    const Kernel& k = t.net->op(n);
    if (k.kernel_name().find("ref:") == std::string::npos) continue;
    ASSERT_FALSE(k.slow_paths().empty()) << k.kernel_name();
    EXPECT_NE(k.slow_paths()[0].find("convolution "), std::string::npos) << k.slow_paths()[0];
    EXPECT_NE(k.reported_name().find("[oneDNN ref (slow): " + k.slow_paths()[0]), std::string::npos)
        << k.reported_name();
    EXPECT_EQ(k.reported_name().rfind(k.kernel_name(), 0), 0u) << k.reported_name();
    named = true;
  }
  EXPECT_TRUE(named);
}

const char* kFanOut = R"(
name: "fanout"
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } } }
layer { name: "act" type: "TanH" bottom: "h" top: "h" }
layer { name: "a" type: "InnerProduct" bottom: "h" top: "a" inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "b" type: "InnerProduct" bottom: "h" top: "b" inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" bottom: "a" top: "s" }
layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "t" top: "loss" }
)";

// MemoryData is filled by the program that runs the net, with Caffe's shapes: data
// (batch, channels, height, width) and label (batch, 1, 1, 1).
TEST(Net, MemoryDataIsFedByTheCaller) {
  TestNet t(R"(
layer { name: 'mem' type: 'MemoryData' top: 'data' top: 'label'
        memory_data_param { batch_size: 2 channels: 1 height: 1 width: 3 } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip'
        inner_product_param { num_output: 1 weight_filler { type: 'constant' value: 1 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'ip' bottom: 'label' top: 'loss' }
)");
  EXPECT_EQ(t.net->value("data").shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(t.net->value("label").shape(), (Shape{2, 1, 1, 1}));
  float* x = t.net->value("data").f32();
  for (int i = 0; i < 6; ++i) x[i] = static_cast<float>(i);
  t.net->value("label").f32()[0] = 3.f, t.net->value("label").f32()[1] = 12.f;
  // ip = row sums (0+1+2, 3+4+5) = 3, 12: the labels exactly.
  EXPECT_NEAR(t.net->forward(), 0.0, 1e-6);
  t.net->value("label").f32()[1] = 10.f;  // loss = (12 - 10)^2 / (2 * batch 2) = 1
  EXPECT_NEAR(t.net->forward(), 1.0, 1e-5);
  t.check();
}

// Filter's tops hold the items its selector marks, and what follows runs on that batch:
// reshaped before each forward (a convolution, an in-place TanH, an inner product and a loss
// after it), compared with the same layers run on the selected items alone, and its
// gradients (the layer before the Filter's included) checked by finite differences.
constexpr const char* kFilterHead = R"(
layer { name: "in" type: "Input" top: "x" top: "label" top: "sel"
        input_param { shape { dim: 6 dim: 2 dim: 4 dim: 4 } shape { dim: 6 } shape { dim: 6 dim: 1 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
        convolution_param { num_output: 8 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "filter" type: "Filter" bottom: "c" bottom: "label" bottom: "sel" top: "fc" top: "flabel" }
)";
constexpr const char* kFilterTail = R"(
layer { name: "conv2" type: "Convolution" bottom: "fc" top: "c2"
        convolution_param { num_output: 8 kernel_size: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "tanh" type: "TanH" bottom: "c2" top: "c2" }
layer { name: "ip" type: "InnerProduct" bottom: "c2" top: "y"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "flabel" top: "loss" }
)";

// The layers after the Filter over `store`'s blobs, with the selected items as inputs.
double filter_tail_loss(TestNet& t, const Tensor& fc, const Tensor& flabel) {
  auto ref = build_net(fmt::format(R"(
layer {{ name: "in" type: "Input" top: "fc" top: "flabel"
        input_param {{ shape {{ dim: {} dim: 8 dim: 2 dim: 2 }} shape {{ dim: {} }} }} }}
{})",
                                   fc.dim(0), fc.dim(0), kFilterTail),
                       t.store, t.backend, proto::TRAIN, {});
  ref->value("fc").copy_from(fc);
  ref->value("flabel").copy_from(flabel);
  return ref->forward();
}

TEST(Net, FilterRunsWhatFollowsOnTheSelectedItems) {
  TestNet t(std::string(kFilterHead) + kFilterTail, proto::TRAIN, /*reuse_buffers=*/false);
  float* label = t.net->value("label").f32();
  for (int i = 0; i < 6; ++i) label[i] = static_cast<float>(i % 3);
  auto select = [&](std::vector<float> sel) { std::copy(sel.begin(), sel.end(), t.net->value("sel").f32()); };

  select({0, 1, 0, 1, 2, 0});  // items 1, 3, 4
  double loss = t.net->forward();
  ASSERT_EQ(t.net->value("fc").shape(), (Shape{3, 8, 2, 2}));
  ASSERT_EQ(t.net->value("flabel").shape(), (Shape{3}));
  Tensor c = t.net->plain_copy(t.net->graph().find_value("c"));
  Tensor fc = t.net->plain_copy(t.net->graph().find_value("fc"));
  const int64_t item = 8 * 2 * 2;
  const int picked[] = {1, 3, 4};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(t.net->value("flabel").f32()[k], label[picked[k]]);
    for (int64_t i = 0; i < item; ++i) ASSERT_EQ(fc.f32()[k * item + i], c.f32()[picked[k] * item + i]);
  }
  // What follows the Filter is planned plain, so any smaller batch is a prefix of its buffer.
  EXPECT_FALSE(t.net->is_blocked(t.net->graph().find_value("c2")));
  EXPECT_NEAR(loss, filter_tail_loss(t, fc, t.net->value("flabel")), 1e-5);
  t.check();

  select({1, 1, 1, 0, 1, 1});  // a larger batch, after a smaller one
  loss = t.net->forward();
  ASSERT_EQ(t.net->value("c2").shape(), (Shape{5, 8, 2, 2}));
  EXPECT_NEAR(loss, filter_tail_loss(t, t.net->plain_copy(t.net->graph().find_value("fc")), t.net->value("flabel")),
              1e-5);
  t.check();
}

// No item selected: nothing after the Filter runs, the loss is 0 (as Caffe's normalised
// losses give for an empty batch) and every gradient is zero; the next batch runs again.
TEST(Net, FilterSelectingNothingContributesNothing) {
  TestNet t(std::string(kFilterHead) + kFilterTail);
  auto select = [&](std::vector<float> sel) { std::copy(sel.begin(), sel.end(), t.net->value("sel").f32()); };
  select({1, 1, 0, 0, 0, 1});
  t.store.clear_grads();
  ASSERT_GT(t.net->forward(), 0.f);
  t.net->backward();
  select({0, 0, 0, 0, 0, 0});
  t.store.clear_grads();
  EXPECT_EQ(t.net->forward(), 0.f);
  EXPECT_EQ(t.net->value("fc").shape(), (Shape{0, 8, 2, 2}));
  t.net->backward();
  for (const Param& p : t.store.all()) {
    if (!p.learnable) continue;
    EXPECT_TRUE(p.grad_written) << p.key;
    for (int64_t i = 0; i < p.grad.numel(); ++i) ASSERT_EQ(p.grad.f32()[i], 0.f) << p.key << "[" << i << "]";
  }
  select({0, 0, 1, 0, 0, 0});
  EXPECT_GT(t.net->forward(), 0.f);
  EXPECT_EQ(t.net->value("y").shape(), (Shape{1, 3}));
  t.check();
}

TEST(Net, FilterBottomsMustMatchTheSelector) {
  auto expect_error = [](const std::string& shapes, const std::string& tops, const std::string& words) {
    try {
      TestNet t(R"(layer { name: "in" type: "Input" top: "x" top: "sel" input_param { )" + shapes +
                R"( } } layer { name: "filter" type: "Filter" bottom: "x" bottom: "sel" )" + tops + " }");
      ADD_FAILURE() << "no error for: " << words;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("layer 'filter'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error("shape { dim: 6 dim: 2 } shape { dim: 5 }", "top: 'fx'", "bottom 0 has shape (6,2)");
  expect_error("shape { dim: 6 dim: 2 } shape { dim: 6 dim: 2 }", "top: 'fx'", "one value per item");
  expect_error("shape { dim: 6 dim: 2 } shape { dim: 6 }", "top: 'fx' top: 'fsel'", "produces 1 top blob(s), got 2");
}

TEST(Net, FanOutAndRepeatedInputGradients) {
  TestNet t(kFanOut);
  t.check();
}

// The remaining BVLC layers inside a planned net: a Parameter blob (no bottoms) learns
// through Tile, and SPP, Im2col and ContrastiveLoss pass gradients to the weights before
// them. Random similarity labels in (-1, 1) truncate to 0: every pair is dissimilar.
const char* kBvlcLayers = R"(
name: "bvlc"
layer { name: "in" type: "Input" top: "x" top: "sim" input_param { shape { dim: 2 dim: 2 dim: 6 dim: 5 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" convolution_param { num_output: 2 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "spp" type: "SPP" bottom: "c" top: "spp" spp_param { pyramid_height: 2 pool: AVE } }
layer { name: "pb" type: "Parameter" top: "pb" parameter_param { shape { dim: 1 dim: 10 } } }
layer { name: "tile" type: "Tile" bottom: "pb" top: "pbt" tile_param { axis: 0 tiles: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "spp" bottom: "pbt" top: "a" }
layer { name: "cols" type: "Im2col" bottom: "c" top: "cols" convolution_param { kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "cols" top: "b" inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "ContrastiveLoss" bottom: "a" bottom: "b" bottom: "sim" top: "loss" contrastive_loss_param { margin: 20 } }
)";

TEST(Net, BvlcStructureLayersAndParameterLearn) {
  TestNet t(kBvlcLayers);
  t.check();
  bool parameter_learns = false;
  for (auto& p : t.store.all()) parameter_learns |= p.key == "pb.0" && p.learnable;
  EXPECT_TRUE(parameter_learns) << "the Parameter layer's blob is a learnable parameter";
}

// Silence takes a blob and gives nothing back: the parameters before it get exactly the
// gradient of the loss through the blob's other consumer (Caffe's Split and Silence).
TEST(Net, SilencedBlobsAddNoGradient) {
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 3 dim: 4 } shape { dim: 3 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "quiet" type: "Silence" bottom: "y" }
layer { name: "ip2" type: "InnerProduct" bottom: "y" top: "z" inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "t" top: "loss" }
)");
  ASSERT_NE(t.net->graph().find_node("quiet"), nullptr);
  t.check();
}

// A SegNet encoder-decoder step: a MAX pooling's mask top read by Upsample after an
// in-place BN (LEARN mode) and ReLU; the net's gradients by finite differences.
TEST(Net, SegNetPoolingMaskAndUpsample) {
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 1 dim: 2 dim: 6 dim: 5 } shape { dim: 1 dim: 2 dim: 6 dim: 5 } } }
layer { name: "c1" type: "Convolution" bottom: "x" top: "c1" convolution_param { num_output: 2 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "pool" type: "Pooling" bottom: "c1" top: "p" top: "mask" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "c2" type: "Convolution" bottom: "p" top: "c2" convolution_param { num_output: 2 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BN" bottom: "c2" top: "c2" bn_param { scale_filler { type: "constant" value: 1 } shift_filler { type: "constant" value: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "c2" top: "c2" }
layer { name: "up" type: "Upsample" bottom: "c2" bottom: "mask" top: "u" upsample_param { upsample_h: 6 upsample_w: 5 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "u" bottom: "t" top: "loss" }
)");
  t.net->forward();
  EXPECT_EQ(t.net->value("u").shape(), (Shape{1, 2, 6, 5}));
  t.check(1e-3f, 3e-2f);
}

TEST(Net, InPlaceChainKeepsGradientsCorrect) {
  // Sigmoid reads its output in backward, so the in-place ReLU after it must not share its
  // buffer; BatchNorm and Scale keep what they need and may.
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 4 dim: 3 dim: 2 dim: 2 } shape { dim: 4 dim: 3 dim: 2 dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" convolution_param { num_output: 3 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" }
layer { name: "sc" type: "Scale" bottom: "c" top: "c" scale_param { bias_term: true } }
layer { name: "sig" type: "Sigmoid" bottom: "c" top: "c" }
layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
layer { name: "loss" type: "EuclideanLoss" bottom: "c" bottom: "t" top: "loss" }
)");
  t.check(1e-2f, 3e-2f);
  std::string d = t.net->describe();
  EXPECT_NE(d.find("bn "), std::string::npos);
}

// conv -> activation -> pool -> conv -> ... runs in oneDNN's channels-last/blocked layouts.
std::string layout_chain(const char* act, const char* pool, bool dropout) {
  return fmt::format(R"(
layer {{ name: "in" type: "Input" top: "x" top: "t" input_param {{ shape {{ dim: 2 dim: 3 dim: 8 dim: 8 }} shape {{ dim: 2 dim: 3 }} }} }}
layer {{ name: "c1" type: "Convolution" bottom: "x" top: "c1" convolution_param {{ num_output: 20 kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.3 }} bias_filler {{ type: "gaussian" std: 0.1 }} }} }}
layer {{ name: "a1" type: "{0}" bottom: "c1" top: "c1" }}
layer {{ name: "p1" type: "Pooling" bottom: "c1" top: "p1" pooling_param {{ pool: {1} kernel_size: 2 stride: 2 }} }}
layer {{ name: "c2" type: "Convolution" bottom: "p1" top: "c2" convolution_param {{ num_output: 17 kernel_size: 3 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
{2}
layer {{ name: "p2" type: "Pooling" bottom: "c2" top: "p2" pooling_param {{ pool: AVE kernel_size: 2 stride: 1 }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "p2" top: "y" inner_product_param {{ num_output: 3 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }}
)",
                     act, pool, dropout ? R"(layer { name: "d2" type: "Dropout" bottom: "c2" top: "c2" })" : "");
}

int count_blocked(const TestNet& t) {
  int blocked = 0;
  for (int v = 0; v < static_cast<int>(t.net->graph().values.size()); ++v) blocked += t.net->is_blocked(v);
  return blocked;
}

TEST(Net, LayoutChainGradientsMatchFiniteDifferences) {
  // Smooth ops only (TanH, average pooling), so finite differences have no kinks to trip on.
  TestNet t(layout_chain("TanH", "AVE", true));
  EXPECT_GE(count_blocked(t), 3) << t.net->describe();
  t.check(1e-2f, 2e-2f);
}

TEST(Net, LayoutChainMatchesPlainLayouts) {
  // ReLU and max pooling: the same values and gradients with and without layout
  // propagation. (Dropout is left out: its mask follows memory order, which layouts change.)
  std::string text = layout_chain("ReLU", "MAX", false);
  TestNet fast(text, proto::TRAIN, false);  // keep every value for comparison
  ::setenv("BKS_LAYOUTS", "plain", 1);
  TestNet plain(text, proto::TRAIN, false);
  ::unsetenv("BKS_LAYOUTS");
  EXPECT_GE(count_blocked(fast), 3) << fast.net->describe();
  EXPECT_EQ(count_blocked(plain), 0);
  for (int v : plain.net->inputs()) plain.net->value(v).copy_from(fast.net->value(v));
  for (auto* t : {&fast, &plain}) {
    t->store.clear_grads();
    t->net->forward();
    t->net->backward();
  }
  for (int v = 0; v < static_cast<int>(fast.net->graph().values.size()); ++v) {
    Tensor a = fast.net->plain_copy(v), b = plain.net->plain_copy(v);
    for (int64_t k = 0; k < a.numel(); ++k)
      ASSERT_NEAR(a.f32()[k], b.f32()[k], 1e-4f * std::max(1.f, std::fabs(b.f32()[k])))
          << "value " << fast.net->graph().values[v].name << " #" << v << " [" << k << "]\n"
          << fast.net->describe();
  }
  for (int i = 0; i < fast.store.size(); ++i) {
    const Tensor &a = fast.store.at(i).grad, &b = plain.store.at(i).grad;
    for (int64_t k = 0; k < a.numel(); ++k)
      ASSERT_NEAR(a.f32()[k], b.f32()[k], 1e-4f * std::max(1.f, std::fabs(b.f32()[k])))
          << fast.store.at(i).key << "[" << k << "]";
  }
}

TEST(Net, BufferReuseChangesNothing) {
  // Liveness-planned memory (one arena shared by a TRAIN and a TEST net, run alternately)
  // gives bitwise the same losses and gradients as private buffers.
  std::string text = layout_chain("ReLU", "MAX", true) + R"(
layer { name: "sum" type: "Reduction" bottom: "y" top: "sum" include { phase: TEST } }
)";
  for (const std::string& net : {text, std::string(kFanOut)}) {
    auto build = [&](ParamStore& store, CpuBackend& be, Phase ph, bool reuse, std::shared_ptr<Arena> arena) {
      NetOptions opt;
      opt.reuse_buffers = reuse;
      opt.arena = arena;
      return build_net(net, store, be, ph, opt);
    };
    CpuBackend be(2);
    ParamStore s1, s2;
    auto arena = std::make_shared<Arena>();
    auto train1 = build(s1, be, proto::TRAIN, true, arena), test1 = build(s1, be, proto::TEST, true, arena);
    auto train2 = build(s2, be, proto::TRAIN, false, nullptr), test2 = build(s2, be, proto::TEST, false, nullptr);
    Rng rng(4);
    for (int v : train1->inputs())
      for (int64_t i = 0; i < train1->value(v).numel(); ++i) train1->value(v).f32()[i] = rng.uniform(-1, 1);
    for (size_t k = 0; k < train1->inputs().size(); ++k) {
      train2->value(train2->inputs()[k]).copy_from(train1->value(train1->inputs()[k]));
      test1->value(test1->inputs()[k]).copy_from(train1->value(train1->inputs()[k]));
      test2->value(test2->inputs()[k]).copy_from(train1->value(train1->inputs()[k]));
    }
    for (int step = 0; step < 3; ++step) {
      s1.clear_grads();
      s2.clear_grads();
      ASSERT_EQ(train1->forward(step), train2->forward(step));
      train1->backward();
      train2->backward();
      for (int i = 0; i < s1.size(); ++i) {
        if (!s1.at(i).learnable) continue;
        ASSERT_EQ(std::memcmp(s1.at(i).grad.raw(), s2.at(i).grad.raw(), s1.at(i).grad.bytes()), 0) << s1.at(i).key;
      }
      ASSERT_EQ(test1->forward(step), test2->forward(step));
      for (size_t k = 0; k < test1->outputs().size(); ++k)
        ASSERT_EQ(test1->value(test1->outputs()[k]).f32()[0], test2->value(test2->outputs()[k]).f32()[0]);
    }
    EXPECT_EQ(arena->size(), std::max(train1->planned_bytes(), test1->planned_bytes())) << "one arena for both";
  }
}

TEST(Net, ResidualAndInceptionStyleBlock) {
  // conv -> BN -> Scale -> ELU (all in place; ELU is smooth enough for finite differences),
  // a shortcut summed back, two branches
  // concatenated, global average pooling: the shapes of ResNet and GoogLeNet.
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 2 dim: 4 dim: 5 dim: 5 } shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "Convolution" bottom: "x" top: "a" convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "a_bn" type: "BatchNorm" bottom: "a" top: "a" }
layer { name: "a_sc" type: "Scale" bottom: "a" top: "a" scale_param { bias_term: true } }
layer { name: "a_act" type: "ELU" bottom: "a" top: "a" }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "x" top: "s" }
layer { name: "s_relu" type: "TanH" bottom: "s" top: "s" }
layer { name: "b1" type: "Convolution" bottom: "s" top: "b1" convolution_param { num_output: 3 kernel_size: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "b2" type: "Convolution" bottom: "s" top: "b2" convolution_param { num_output: 2 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "cat" type: "Concat" bottom: "b1" bottom: "b2" top: "cat" }
layer { name: "gap" type: "Pooling" bottom: "cat" top: "gap" pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "gap" top: "y" inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)");
  t.check(1e-2f, 3e-2f);
}

TEST(Net, ConcatWrittenInPlaceAtBatchOne) {
  // Inference at batch 1: each branch writes straight into its run of the Concat's output
  // (nothing before the channel axis). Item 0 of a batch-2 net, which copies, must agree.
  auto text = [](int batch) {
    return fmt::format(R"(
layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: {} dim: 4 dim: 6 dim: 6 }} }} }}
layer {{ name: "b1" type: "Convolution" bottom: "x" top: "b1" convolution_param {{ num_output: 3 kernel_size: 1 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
layer {{ name: "b2" type: "Convolution" bottom: "x" top: "b2" convolution_param {{ num_output: 5 kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
layer {{ name: "b3" type: "Pooling" bottom: "x" top: "b3" pooling_param {{ pool: MAX kernel_size: 3 stride: 1 pad: 1 }} }}
layer {{ name: "cat" type: "Concat" bottom: "b1" bottom: "b2" bottom: "b3" top: "cat" }}
layer {{ name: "c" type: "Convolution" bottom: "cat" top: "y" convolution_param {{ num_output: 2 kernel_size: 3 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
)",
                       batch);
  };
  CpuBackend be(2);
  ParamStore store;
  auto one = build_net(text(1), store, be, proto::TEST, {});
  auto two = build_net(text(2), store, be, proto::TEST, {});  // same weights (one store)
  std::string d = one->describe();
  size_t into = 0;
  for (size_t at = d.find("written into cat"); at != std::string::npos; at = d.find("written into cat", at + 1)) ++into;
  EXPECT_EQ(into, 3u) << d;
  EXPECT_EQ(two->describe().find("written into"), std::string::npos);
  Rng rng(2);
  Tensor& x1 = one->value("x");
  Tensor& x2 = two->value("x");
  for (int64_t i = 0; i < x2.numel(); ++i) x2.f32()[i] = rng.uniform(-1, 1);
  std::memcpy(x1.f32(), x2.f32(), x1.bytes());
  one->forward();
  two->forward();
  const Tensor &y1 = one->value("y"), &y2 = two->value("y");
  for (int64_t i = 0; i < y1.numel(); ++i) EXPECT_NEAR(y1.f32()[i], y2.f32()[i], 1e-5f) << i;
  const Tensor &c1 = one->value("cat"), &c2 = two->value("cat");
  for (int64_t i = 0; i < c1.numel(); ++i) ASSERT_NEAR(c1.f32()[i], c2.f32()[i], 1e-5f) << i;
}

TEST(Net, InceptionConcatKeepsTheConvolutionsLayout) {
  // GoogLeNet's stem and one Inception block at inference: the branches' convolutions
  // write channels-last or channel-blocked outputs, which the Concat joins in that layout
  // (no reorder to NCHW and back). Values must match a run in plain layouts.
  auto text = [](int batch) {
    return fmt::format(R"(
layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: {} dim: 3 dim: 32 dim: 32 }} }} }}
layer {{ name: "c1" type: "Convolution" bottom: "x" top: "c1" convolution_param {{ num_output: 16 kernel_size: 7 stride: 2 pad: 3 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "r1" type: "ReLU" bottom: "c1" top: "c1" }}
layer {{ name: "p1" type: "Pooling" bottom: "c1" top: "p1" pooling_param {{ pool: MAX kernel_size: 3 stride: 2 }} }}
layer {{ name: "c2" type: "Convolution" bottom: "p1" top: "c2" convolution_param {{ num_output: 32 kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "p2" type: "Pooling" bottom: "c2" top: "p2" pooling_param {{ pool: MAX kernel_size: 3 stride: 2 }} }}
layer {{ name: "b1" type: "Convolution" bottom: "p2" top: "b1" convolution_param {{ num_output: 16 kernel_size: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "b2a" type: "Convolution" bottom: "p2" top: "b2a" convolution_param {{ num_output: 16 kernel_size: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "b2" type: "Convolution" bottom: "b2a" top: "b2" convolution_param {{ num_output: 24 kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "b3a" type: "Pooling" bottom: "p2" top: "b3a" pooling_param {{ pool: MAX kernel_size: 3 stride: 1 pad: 1 }} }}
layer {{ name: "b3" type: "Convolution" bottom: "b3a" top: "b3" convolution_param {{ num_output: 8 kernel_size: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "cat" type: "Concat" bottom: "b1" bottom: "b2" bottom: "b3" top: "cat" }}
layer {{ name: "p3" type: "Pooling" bottom: "cat" top: "p3" pooling_param {{ pool: MAX kernel_size: 3 stride: 1 pad: 1 }} }}
layer {{ name: "c3" type: "Convolution" bottom: "p3" top: "y" convolution_param {{ num_output: 8 kernel_size: 3 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
)",
                       batch);
  };
  for (int batch : {1, 3}) {
    CpuBackend be(2);
    ParamStore store;
    NetOptions keep;
    keep.reuse_buffers = false;  // every value stays readable after the pass
    auto fast = build_net(text(batch), store, be, proto::TEST, keep);
    ::setenv("BKS_LAYOUTS", "plain", 1);
    auto plain = build_net(text(batch), store, be, proto::TEST, keep);  // same weights (one store)
    ::unsetenv("BKS_LAYOUTS");
    const std::string d = fast->describe();
    EXPECT_TRUE(d.find("channels-last copies") != std::string::npos || d.find("c copies") != std::string::npos) << d;
    Rng rng(5);
    Tensor& x = fast->value("x");
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = rng.uniform(-1, 1);
    plain->value("x").copy_from(x);
    fast->forward();
    plain->forward();
    for (const char* blob : {"p2", "b1", "b2", "b3a", "b3", "cat", "y"}) {
      Tensor a = fast->plain_copy(fast->graph().find_value(blob)), b = plain->plain_copy(plain->graph().find_value(blob));
      ASSERT_EQ(a.numel(), b.numel());
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_NEAR(a.f32()[i], b.f32()[i], 1e-4f * std::max(1.f, std::fabs(b.f32()[i]))) << blob << " [" << i << "] batch " << batch << "\n" << d;
    }
  }
}

// An encoder LSTM hands its final h and c to a GRU decoder through exposed states; the
// whole net's loss checks every blob's gradient, the ones that cross between the two included.
TEST(Net, RecurrentLayersPassTheirStatesOn) {
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "cont" top: "h0" top: "c0" top: "t"
  input_param { shape { dim: 3 dim: 2 dim: 4 } shape { dim: 3 dim: 2 } shape { dim: 1 dim: 2 dim: 5 }
                shape { dim: 1 dim: 2 dim: 5 } shape { dim: 3 dim: 2 dim: 2 } } }
layer { name: "enc" type: "LSTM" bottom: "x" bottom: "cont" bottom: "h0" bottom: "c0" top: "he" top: "hT" top: "cT"
  recurrent_param { num_output: 5 expose_hidden: true weight_filler { type: "gaussian" std: 0.4 }
                    bias_filler { type: "gaussian" std: 0.4 } } }
layer { name: "dec" type: "GRU" bottom: "x" bottom: "cont" bottom: "hT" top: "hd" top: "hdT"
  recurrent_param { num_output: 5 expose_hidden: true weight_filler { type: "gaussian" std: 0.4 }
                    bias_filler { type: "gaussian" std: 0.4 } } }
layer { name: "silence" type: "Silence" bottom: "cT" bottom: "hdT" }
layer { name: "sum" type: "Eltwise" bottom: "he" bottom: "hd" top: "s" }
layer { name: "ip" type: "InnerProduct" bottom: "s" top: "y"
  inner_product_param { num_output: 2 axis: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)");
  EXPECT_EQ(t.store.size(), 3 + 4 + 2) << "LSTM W_xc b_c W_hc, GRU W_x b_x W_h b_h, ip";
  t.check();
}

TEST(Net, SharedWeightsSumGradients) {
  TestNet t(R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 3 dim: 4 } shape { dim: 3 dim: 4 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "y1" param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "y1" top: "y2" param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y2" bottom: "t" top: "loss" }
)");
  EXPECT_EQ(t.store.size(), 2) << "ip2 shares ip1's blobs";
  EXPECT_EQ(t.store.at(0).key, "ip1.0");
  t.check();
}

// Caffe's rule for the multipliers of a shared blob: layers that both give one must agree,
// and one given only by a later layer holds for the blob (what the solver applies).
TEST(Net, SharedBlobsAgreeOnTheirMultipliers) {
  auto net = [](const std::string& first, const std::string& second) {
    return fmt::format(R"(
layer {{ name: "in" type: "Input" top: "x" top: "t" input_param {{ shape {{ dim: 3 dim: 4 }} shape {{ dim: 3 dim: 4 }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "x" top: "y1" param {{ name: "w" {} }} inner_product_param {{ num_output: 4 bias_term: false }} }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "y1" top: "y2" param {{ name: "w" {} }} inner_product_param {{ num_output: 4 bias_term: false }} }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "y2" bottom: "t" top: "loss" }}
)",
                       first, second);
  };
  try {
    TestNet t(net("lr_mult: 1", "lr_mult: 2"));
    ADD_FAILURE() << "mismatched lr_mult accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'ip2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared parameter 'w' has lr_mult 2 here but 1 in layer 'ip1'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TestNet(net("decay_mult: 0", "decay_mult: 1")), InputError);
  TestNet same(net("lr_mult: 3", "lr_mult: 3"));
  EXPECT_EQ(same.store.at(0).lr_mult, 3.f);
  TestNet adopted(net("", "lr_mult: 0 decay_mult: 2"));
  ASSERT_EQ(adopted.store.size(), 1);
  EXPECT_EQ(adopted.store.at(0).lr_mult, 0.f) << "ip2's lr_mult holds for the blob: the solver leaves it";
  EXPECT_EQ(adopted.store.at(0).decay_mult, 2.f);
}

TEST(Net, GradientsAccumulateAcrossBackwardPasses) {
  // iter_size: without clear_grads() between micro-batches the store sums their gradients.
  TestNet once(kFanOut), twice(kFanOut);
  once.store.clear_grads();
  once.net->forward();
  once.net->backward();
  twice.store.clear_grads();
  for (int k = 0; k < 2; ++k) {
    twice.net->forward();
    twice.net->backward();
  }
  for (int i = 0; i < once.store.size(); ++i)
    for (int64_t j = 0; j < once.store.at(i).grad.numel(); ++j)
      ASSERT_NEAR(twice.store.at(i).grad.f32()[j], 2 * once.store.at(i).grad.f32()[j], 1e-5)
          << once.store.at(i).key << "[" << j << "]";
}

// Caffe's debug_info on a net whose statistics are known: y = 0.5 (x0 + x1) + 0.25 for
// x = (1, -2), (3, 4) gives y = (-0.25, 3.75); the Euclidean loss to 0 is 3.53125, its
// gradient (-0.125, 1.875); dW = (5.5, 7.75), db = 1.75.
TEST(Net, DebugInfoLogsCaffesStatistics) {
  const char* text = R"(
layer { name: 'x' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 2 } } }
layer { name: 't' type: 'Input' top: 't' input_param { shape { dim: 2 dim: 1 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' param { name: 'w' }
        inner_product_param { num_output: 1 weight_filler { type: 'constant' value: 0.5 }
                              bias_filler { type: 'constant' value: 0.25 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";
  TestNet t(text);
  const float x[] = {1, -2, 3, 4};
  std::copy(x, x + 4, t.net->value("x").f32());
  t.net->value("t").zero();
  const std::string path = (std::filesystem::temp_directory_path() / "bks_net_debug_info.log").string();
  std::filesystem::remove(path);
  auto run = [&](bool on) {
    log::set_file(path);
    t.net->set_debug_info(on);
    t.store.clear_grads();
    t.net->forward();
    t.net->backward();
    t.net->update_debug_info();
    log::set_file("");
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::filesystem::remove(path);
    return ss.str();
  };
  EXPECT_EQ(run(true),
            "[info]     [Forward] Layer x, top blob x data: 2.5\n"
            "[info]     [Forward] Layer t, top blob t data: 0\n"
            "[info]     [Forward] Layer ip, top blob y data: 2\n"
            "[info]     [Forward] Layer ip, param blob w data: 0.5\n"
            "[info]     [Forward] Layer ip, param blob 1 data: 0.25\n"
            "[info]     [Forward] Layer loss, top blob loss data: 3.53125\n"
            "[info]     [Backward] Layer loss, bottom blob y diff: 1\n"
            "[info]     [Backward] Layer ip, param blob 0 diff: 6.625\n"
            "[info]     [Backward] Layer ip, param blob 1 diff: 1.75\n"
            "[info]     [Backward] All net params (data, diff): L1 norm = (1.25, 15); L2 norm = (0.75, 9.66307)\n"
            "[info]     [Update] Layer ip, param w data: 0.5; diff: 6.625\n"
            "[info]     [Update] Layer ip, param 1 data: 0.25; diff: 1.75\n");
  // Off, nothing is printed by forward and backward.
  std::string off = run(false);
  EXPECT_EQ(off.find("[Forward]"), std::string::npos) << off;
  EXPECT_EQ(off.find("[Backward]"), std::string::npos) << off;
}

TEST(Net, GradReadyHookFiresOncePerParameter) {
  TestNet t(kFanOut);
  std::vector<int> fired;
  t.net->set_grad_ready_hook([&](int idx) { fired.push_back(idx); });
  t.store.clear_grads();
  t.net->forward();
  t.net->backward();
  std::sort(fired.begin(), fired.end());
  std::vector<int> all(t.net->param_indices());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(fired, all);
}

TEST(Net, LossWeightScalesGradient) {
  const char* net = R"(
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" loss_weight: %s }
)";
  char a[1024], b[1024];
  std::snprintf(a, sizeof a, net, "1");
  std::snprintf(b, sizeof b, net, "3");
  TestNet t1(a), t3(b);
  float l1 = t1.net->forward(), l3 = t3.net->forward();
  EXPECT_NEAR(l3, 3 * l1, 1e-5);
  t1.net->backward();
  t3.net->backward();
  EXPECT_NEAR(t3.store.at(0).grad.f32()[0], 3 * t1.store.at(0).grad.f32()[0], 1e-5);
}

TEST(Net, PhaseFilteringAndStages) {
  const char* text = R"(
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "tr" type: "ReLU" bottom: "x" top: "a" include { phase: TRAIN } }
layer { name: "te" type: "TanH" bottom: "x" top: "a" include { phase: TEST } }
layer { name: "st" type: "Sigmoid" bottom: "a" top: "b" include { stage: "deploy" } }
)";
  TestNet tr(text, proto::TRAIN), te(text, proto::TEST);
  EXPECT_NE(tr.net->graph().find_node("tr"), nullptr);
  EXPECT_EQ(tr.net->graph().find_node("te"), nullptr);
  EXPECT_NE(te.net->graph().find_node("te"), nullptr);
  EXPECT_EQ(te.net->graph().find_node("st"), nullptr);
}

// Caffe's NetStateRule: include rules (any may match), exclude rules (none may), each rule
// with phase, min/max level, stages (all needed) and not_stages (none present).
TEST(Net, IncludeAndExcludeRulesFollowCaffe) {
  auto runs = [](const std::string& rules, int phase, int level, std::vector<std::string> stages) {
    proto::LayerParameter l;
    parse_prototxt_string("name: 'l' type: 'ReLU' " + rules, "rules", l);
    proto::NetState st;
    st.set_phase(static_cast<proto::Phase>(phase));
    st.set_level(level);
    for (auto& s : stages) st.add_stage(s);
    return layer_included(l, st);
  };
  const int TRAIN = proto::TRAIN, TEST = proto::TEST;
  EXPECT_TRUE(runs("", TEST, 0, {}));
  EXPECT_FALSE(runs("exclude { phase: TEST }", TEST, 0, {}));
  EXPECT_TRUE(runs("exclude { phase: TEST }", TRAIN, 0, {}));
  EXPECT_FALSE(runs("exclude { stage: 'deploy' }", TEST, 0, {"deploy"}));
  EXPECT_TRUE(runs("exclude { stage: 'deploy' }", TEST, 0, {"train"}));
  // min_level / max_level, inclusive.
  EXPECT_FALSE(runs("include { min_level: 2 }", TEST, 1, {}));
  EXPECT_TRUE(runs("include { min_level: 2 }", TEST, 2, {}));
  EXPECT_TRUE(runs("include { max_level: 2 }", TEST, 2, {}));
  EXPECT_FALSE(runs("include { max_level: 2 }", TEST, 3, {}));
  EXPECT_TRUE(runs("exclude { min_level: 3 }", TEST, 2, {}));
  EXPECT_FALSE(runs("exclude { min_level: 3 }", TEST, 3, {}));
  // Every stage of a rule is needed; any not_stage present defeats it.
  EXPECT_FALSE(runs("include { stage: 'a' stage: 'b' }", TEST, 0, {"a"}));
  EXPECT_TRUE(runs("include { stage: 'a' stage: 'b' }", TEST, 0, {"b", "a"}));
  EXPECT_FALSE(runs("include { stage: 'a' not_stage: 'c' }", TEST, 0, {"a", "c"}));
  EXPECT_TRUE(runs("include { not_stage: 'c' }", TEST, 0, {"a"}));
  // Several include rules: any one suffices.
  EXPECT_TRUE(runs("include { phase: TRAIN } include { stage: 'x' }", TEST, 0, {"x"}));
  EXPECT_FALSE(runs("include { phase: TRAIN } include { stage: 'x' }", TEST, 0, {}));
  // A rule's fields all hold together.
  EXPECT_FALSE(runs("include { phase: TEST stage: 'x' }", TRAIN, 0, {"x"}));
}

// Caffe's fillers, by their statistics over many values (and bilinear by its exact values).
struct Moments {
  double mean = 0, var = 0, min = 1e30, max = -1e30, zeros = 0;
};
Moments fill_and_measure(const Shape& shape, const FillerSpec& f) {
  Tensor t(shape);
  Rng rng(3);
  fill_tensor(t, f, rng, "layer 'w'");
  Moments m;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.f32()[i];
    m.mean += v / n, m.min = std::min(m.min, v), m.max = std::max(m.max, v), m.zeros += v == 0 ? 1.0 / n : 0.0;
  }
  for (int64_t i = 0; i < n; ++i) m.var += (t.f32()[i] - m.mean) * (t.f32()[i] - m.mean) / n;
  return m;
}

TEST(Fillers, StatisticsFollowCaffe) {
  const Shape shape{200, 50, 3, 3};  // fan_in = 450, fan_out = 1800: 90,000 values
  FillerSpec f;
  f.type = "constant", f.value = 0.25f;
  Moments m = fill_and_measure(shape, f);
  EXPECT_EQ(m.min, 0.25);
  EXPECT_EQ(m.max, 0.25);
  f.type = "uniform", f.min = -2.f, f.max = 4.f;
  m = fill_and_measure(shape, f);
  EXPECT_GE(m.min, -2.0);
  EXPECT_LE(m.max, 4.0);
  EXPECT_NEAR(m.mean, 1.0, 0.03);
  EXPECT_NEAR(m.var, 3.0, 0.05);  // (max - min)^2 / 12
  f.type = "gaussian", f.mean = 1.f, f.std = 0.5f;
  m = fill_and_measure(shape, f);
  EXPECT_NEAR(m.mean, 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(m.var), 0.5, 0.01);
  // sparse: each of the 200 outputs keeps about 20 of its inputs.
  f.sparse = 20;
  m = fill_and_measure(shape, f);
  EXPECT_NEAR(m.zeros, 0.9, 0.01);
  f.sparse = -1;
  // xavier: uniform with variance 1/n; msra: gaussian with variance 2/n, n by variance_norm.
  for (auto [norm, n] : {std::pair{FillerSpec::fan_in, 450.0}, std::pair{FillerSpec::fan_out, 1800.0},
                         std::pair{FillerSpec::average, 1125.0}}) {
    f.variance_norm = norm;
    f.type = "xavier";
    m = fill_and_measure(shape, f);
    EXPECT_NEAR(m.mean, 0.0, 0.002);
    EXPECT_NEAR(m.var * n, 1.0, 0.03) << "variance_norm " << norm;
    EXPECT_LE(m.max, std::sqrt(3.0 / n) + 1e-6);
    f.type = "msra";
    m = fill_and_measure(shape, f);
    EXPECT_NEAR(m.mean, 0.0, 0.003);
    EXPECT_NEAR(m.var * n, 2.0, 0.06) << "variance_norm " << norm;
  }
  // positive_unitball: each output's weights are in [0, 1] and sum to 1.
  f.type = "positive_unitball";
  Tensor t(Shape{4, 10});
  Rng rng(1);
  fill_tensor(t, f, rng, "layer 'w'");
  for (int r = 0; r < 4; ++r) {
    double sum = 0;
    for (int j = 0; j < 10; ++j) {
      EXPECT_GE(t.f32()[r * 10 + j], 0.f);
      sum += t.f32()[r * 10 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  f.type = "orthogonal";
  try {
    fill_and_measure(shape, f);
    ADD_FAILURE() << "an unknown filler type was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'w': unknown filler type 'orthogonal'"), std::string::npos) << e.what();
  }
}

// Bilinear upsampling kernels as Caffe fills them: f = ceil(k / 2), centre c = (k - 1) / (2f),
// each value (1 - |x/f - c|)(1 - |y/f - c|), the same for every (output, input) pair.
TEST(Fillers, BilinearKernelsAreCaffes) {
  FillerSpec f;
  f.type = "bilinear";
  auto row0 = [&](int64_t k) {  // the first row of the first kernel, and a check that all are equal
    Tensor t(Shape{2, 3, k, k});
    Rng rng(1);
    fill_tensor(t, f, rng, "layer 'up'");
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.f32()[i], t.f32()[i % (k * k)]);
    return std::vector<float>(t.f32(), t.f32() + k);
  };
  auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "x = " << i;
  };
  // k = 3 (f = 2, c = 0.5): the y = 0 row weighs (1 - |0 - 0.5|) = 0.5 times [0.5, 1, 0.5].
  near(row0(3), {0.25f, 0.5f, 0.25f});
  // k = 4 (f = 2, c = 0.75): 0.25 times [0.25, 0.75, 0.75, 0.25].
  near(row0(4), {0.0625f, 0.1875f, 0.1875f, 0.0625f});
  // k = 2 (f = 1, c = 0.5): 0.5 times [0.5, 0.5].
  near(row0(2), {0.25f, 0.25f});
  // FCN-8s' upscore8 (k = 16, f = 8, c = 15/16): symmetric, peaks in the middle pair.
  std::vector<float> r = row0(16);
  for (int x = 0; x < 16; ++x) EXPECT_NEAR(r[x], r[15 - x], 1e-6);
  EXPECT_NEAR(r[7], (1 - 15.0 / 16) * (1 - std::fabs(7.0 / 8 - 15.0 / 16)), 1e-6);
  Tensor flat(Shape{2, 3, 4, 2});
  Rng rng(1);
  EXPECT_THROW(fill_tensor(flat, f, rng, "layer 'up'"), InputError);
}

}  // namespace
}  // namespace bks
