// Structured pruning (bakusoku prune-channels): which channels can go together, that removing
// channels which contribute nothing leaves a net's outputs as they were (through BatchNorm,
// Scale, Eltwise, a depthwise convolution, Concat and Flatten), and LeNet pruned by half its
// convolution multiply-adds fine-tuning back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "backend/dnnl_util.h"
#include "cli_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/channel_groups.h"
#include "engine/channel_pruning.h"
#include "engine/recalibrate_statistics.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "ops/shape_inference.h"
#include "runtime/net.h"

namespace bks::test {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("bks_chprune_" + name)).string();
}

// Every kind of channel flow: conv1 -> BatchNorm -> Scale -> ReLU; two convolutions summed by
// an Eltwise (one group), then a depthwise convolution; both concatenated; conv3, pooling,
// Flatten, ip1, and ip2 (the net's output, which stays).
const char* kBranchy = R"(
name: "branchy"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 10 dim: 10 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { use_global_stats: true } }
layer { name: "sc1" type: "Scale" bottom: "conv1" top: "conv1"
  scale_param { bias_term: true filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2a" type: "Convolution" bottom: "conv1" top: "conv2a"
  convolution_param { num_output: 6 kernel_size: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "conv2b" type: "Convolution" bottom: "conv1" top: "conv2b"
  convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "sum" type: "Eltwise" bottom: "conv2a" bottom: "conv2b" top: "sum" }
layer { name: "relu2" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "dw" type: "Convolution" bottom: "sum" top: "dw"
  convolution_param { num_output: 6 group: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "cat" type: "Concat" bottom: "conv1" bottom: "dw" top: "cat" }
layer { name: "conv3" type: "Convolution" bottom: "cat" top: "conv3"
  convolution_param { num_output: 5 kernel_size: 3 stride: 2 weight_filler { type: "gaussian" std: 0.5 }
                      bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "pool3" type: "Pooling" bottom: "conv3" top: "pool3" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "flat" type: "Flatten" bottom: "pool3" top: "flat" }
layer { name: "ip1" type: "InnerProduct" bottom: "flat" top: "ip1"
  inner_product_param { num_output: 7 weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "relu4" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
)";

Graph test_graph(const std::string& text) {
  NetLoad nl = parse_net_text(text, "branchy.prototxt");
  proto::NetState st;
  st.set_phase(proto::TEST);
  Graph g = build_caffe_graph(nl, st);
  infer_shapes(g, proto::TEST);
  return g;
}

int node_index(const Graph& g, const std::string& name) {
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].name == name) return static_cast<int>(n);
  return -1;
}

TEST(ChannelGroups, FollowsChannelsThroughEltwiseConcatAndFlatten) {
  const Graph g = test_graph(kBranchy);
  const ChannelGroups groups(g);
  auto group_of = [&](const std::string& layer) { return groups.written_by(node_index(g, layer)); };
  // The Eltwise makes conv2a and conv2b one group.
  ASSERT_GE(group_of("conv2a"), 0);
  EXPECT_EQ(group_of("conv2a"), group_of("conv2b"));
  EXPECT_EQ(groups.group(group_of("conv2a")).writers.size(), 2u);
  EXPECT_NE(group_of("conv1"), group_of("conv2a"));
  for (const char* layer : {"conv1", "conv2a", "conv3", "ip1"})
    EXPECT_EQ(groups.group(group_of(layer)).fixed, "") << layer;
  EXPECT_EQ(groups.group(group_of("ip2")).fixed, "a net output ('ip2')");
  EXPECT_EQ(groups.written_by(node_index(g, "dw")), -1);  // depthwise: passes channels on
  // The Concat's output: conv1's 8 channels, then the summed group's 6.
  const ChannelLayout& cat = groups.layout(g.find_value("cat"));
  ASSERT_EQ(cat.size(), 2u);
  EXPECT_EQ(groups.root(cat[0].group), group_of("conv1"));
  EXPECT_EQ(cat[0].count, 8);
  EXPECT_EQ(groups.root(cat[1].group), group_of("conv2a"));
  EXPECT_EQ(cat[1].count, 6);
  // Flatten: each of conv3's channels is a run of 2 x 2 values.
  const ChannelLayout& flat = groups.layout(g.find_value("flat"));
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(groups.root(flat[0].group), group_of("conv3"));
  EXPECT_EQ(flat[0].inner, 4);
  // The input's channels stay; an across-channel LRN fixes what it reads.
  EXPECT_EQ(groups.group(groups.root(groups.layout(g.find_value("data"))[0].group)).fixed, "written by 'data' (Input)");
  std::string lrn = kBranchy;
  lrn += R"(layer { name: "norm" type: "LRN" bottom: "conv3" top: "norm" lrn_param { local_size: 3 } })";
  const Graph g2 = test_graph(lrn);
  const ChannelGroups groups2(g2);
  EXPECT_EQ(groups2.group(groups2.written_by(node_index(g2, "conv3"))).fixed, "read by 'norm' (LRN)");
}

// A Concat of a value with itself, nested: each level doubles the runs a layout would list
// (2^24 after 24 levels). Past the limit a concat fixes its inputs and starts a group.
TEST(ChannelGroups, NestedSelfConcatsStopListingRuns) {
  std::string text = R"(layer { name: "data" type: "Input" top: "c0" input_param { shape { dim: 1 dim: 1 } } }
)";
  for (int k = 1; k <= 24; ++k)
    text += fmt::format("layer {{ name: \"c{0}\" type: \"Concat\" bottom: \"c{1}\" bottom: \"c{1}\" top: \"c{0}\" }}\n",
                        k, k - 1);
  const Graph g = test_graph(text);
  const ChannelGroups groups(g);
  EXPECT_EQ(groups.layout(g.find_value("c12")).size(), 4096u);  // listed up to the limit
  EXPECT_EQ(groups.flow(node_index(g, "c13")), ChannelFlow::blocks);
  const ChannelLayout& c13 = groups.layout(g.find_value("c13"));
  ASSERT_EQ(c13.size(), 1u);  // a group of its own, which doubles again from there
  EXPECT_EQ(groups.group(groups.root(c13[0].group)).fixed, "written by 'c13' (Concat)");
  EXPECT_EQ(groups.layout(g.find_value("c24")).size(), 2048u);
}

// A net built from a NetParameter in the TEST phase, its input filled from `seed`.
struct TestNet {
  CpuBackend backend{2};
  ParamStore store;
  std::unique_ptr<Net> net;
  explicit TestNet(const proto::NetParameter& param) {
    NetLoad nl;
    nl.param = param;
    nl.source = "branchy.prototxt";
    proto::NetState st;
    st.set_phase(proto::TEST);
    net = std::make_unique<Net>(build_caffe_graph(nl, st), proto::TEST, store, backend, 3);
    Rng rng(11);
    for (int v : net->inputs())
      for (int64_t i = 0; i < net->value(v).numel(); ++i) net->value(v).f32()[i] = rng.uniform(-1, 1);
  }
  Tensor& blob(const std::string& key) { return store.at(store.find(key)).data; }
  std::vector<float> output(const std::string& name) {
    net->forward();
    const Tensor t = net->plain_copy(net->graph().find_value(name));
    return {t.f32(), t.f32() + t.numel()};
  }
};

TEST(ChannelPruning, RemovingChannelsThatContributeNothingKeepsTheOutputs) {
  TestNet original(parse_net_text(kBranchy, "branchy.prototxt").param);
  // BatchNorm statistics: any mean, a positive variance, factor 1.
  Rng rng(5);
  for (int64_t c = 0; c < 8; ++c) {
    original.blob("bn1.0").f32()[c] = rng.uniform(-1, 1);
    original.blob("bn1.1").f32()[c] = rng.uniform(0.5, 1.5);
  }
  original.blob("bn1.2").f32()[0] = 1.f;
  // Channels that contribute nothing: conv1's 1, 4, 6 and 7 through a zero Scale (ranked by
  // it, criterion bn); the others by zero filters and bias (ranked by l1, as no BN scale
  // follows them): conv2a/conv2b's 0, 2, 5 (the depthwise bias too), conv3's 1 and 3, ip1's
  // 0, 3, 6.
  for (int64_t c : {1, 4, 6, 7}) original.blob("sc1.0").f32()[c] = original.blob("sc1.1").f32()[c] = 0.f;
  auto zero_filters = [&](const std::string& layer, std::initializer_list<int64_t> channels) {
    Tensor& w = original.blob(layer + ".0");
    const int64_t per = w.numel() / w.dim(0);
    for (int64_t c : channels) {
      std::fill_n(w.f32() + c * per, per, 0.f);
      original.blob(layer + ".1").f32()[c] = 0.f;
    }
  };
  zero_filters("conv2a", {0, 2, 5});
  zero_filters("conv2b", {0, 2, 5});
  for (int64_t c : {0, 2, 5}) original.blob("dw.1").f32()[c] = 0.f;
  zero_filters("conv3", {1, 3});
  zero_filters("ip1", {0, 3, 6});
  const std::vector<float> before = original.output("ip2");

  const std::string model = temp_path("branchy.prototxt"), weights = temp_path("branchy.safetensors");
  std::ofstream(model) << kBranchy;
  std::vector<std::pair<std::string, const Tensor*>> blobs;
  for (const Param& p : original.store.all()) blobs.emplace_back(p.key, &p.data);
  save_safetensors(weights, blobs, {});

  ChannelPruneOptions o;
  o.ratio = 0.5;
  o.criterion = "bn";
  const ChannelPruneResult r = prune_channels(model, weights, o);
  ASSERT_EQ(r.groups.size(), 4u);
  EXPECT_EQ(r.groups[0].layers, (std::vector<std::string>{"conv1"}));
  EXPECT_EQ(r.groups[0].criterion, "bn");
  EXPECT_EQ(r.groups[0].kept, 4);
  EXPECT_EQ(r.groups[1].layers, (std::vector<std::string>{"conv2a", "conv2b"}));
  EXPECT_EQ(r.groups[1].criterion, "l1 (no BN scale)");
  EXPECT_EQ(r.groups[1].kept, 3);
  EXPECT_EQ(r.groups[2].kept, 3);  // conv3: 5 - floor(2.5)
  EXPECT_EQ(r.groups[3].kept, 4);  // ip1
  EXPECT_EQ(r.kept_whole, (std::vector<std::string>{"ip2: a net output ('ip2')"}));
  const std::map<std::string, Shape> want{{"conv1.0", {4, 3, 3, 3}},
                                          {"conv1.1", {4}},
                                          {"bn1.0", {4}},
                                          {"bn1.2", {1}},
                                          {"sc1.0", {4}},
                                          {"sc1.1", {4}},
                                          {"conv2a.0", {3, 4, 1, 1}},
                                          {"conv2b.0", {3, 4, 3, 3}},
                                          {"dw.0", {3, 1, 3, 3}},
                                          {"dw.1", {3}},
                                          {"conv3.0", {3, 7, 3, 3}},
                                          {"conv3.1", {3}},
                                          {"ip1.0", {4, 12}},
                                          {"ip1.1", {4}},
                                          {"ip2.0", {3, 4}},
                                          {"ip2.1", {3}}};
  for (const auto& [key, shape] : want) {
    ASSERT_TRUE(r.weights.count(key)) << key;
    EXPECT_EQ(r.weights.at(key).shape(), shape) << key;
  }
  // The net is the same file with smaller layers: the depthwise convolution's group follows.
  const proto::NetParameter& net = r.net;
  ASSERT_EQ(net.layer_size(), 17);
  EXPECT_EQ(net.layer(1).convolution_param().num_output(), 4u);
  EXPECT_EQ(net.layer(9).name(), "dw");
  EXPECT_EQ(net.layer(9).convolution_param().group(), 3u);
  EXPECT_EQ(net.layer(14).inner_product_param().num_output(), 4u);
  EXPECT_EQ(net.layer(16).inner_product_param().num_output(), 3u);

  TestNet pruned(net);
  ASSERT_EQ(load_weights(r.weights, pruned.store, "pruned"), pruned.store.size());
  const std::vector<float> after = pruned.output("ip2");
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i], 1e-4 * (1 + std::fabs(before[i]))) << i;
  // Multiply-adds per item: each convolution's output channels x its filter's size.
  EXPECT_DOUBLE_EQ(r.conv_macs_before, 8 * 100 * 27 + 6 * 100 * 8 + 6 * 100 * 72 + 6 * 100 * 9 + 5 * 16 * 126.0);
  EXPECT_DOUBLE_EQ(r.conv_macs_after, 4 * 100 * 27 + 3 * 100 * 4 + 3 * 100 * 36 + 3 * 100 * 9 + 3 * 16 * 63.0);
}

TEST(ChannelPruning, BadOptionsAreOneClearError) {
  const std::string model = temp_path("bad.prototxt"), weights = temp_path("bad.safetensors");
  std::ofstream(model) << kBranchy;
  {
    TestNet t(parse_net_text(kBranchy, "branchy.prototxt").param);
    std::vector<std::pair<std::string, const Tensor*>> blobs;
    for (const Param& p : t.store.all()) blobs.emplace_back(p.key, &p.data);
    save_safetensors(weights, blobs, {});
  }
  auto error_of = [&](double ratio, double flops, const std::string& criterion, std::vector<std::string> layers) {
    ChannelPruneOptions o;
    o.ratio = ratio;
    o.flops = flops;
    o.criterion = criterion;
    o.layers = std::move(layers);
    try {
      prune_channels(model, weights, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(1, -1, "l1", {}), "--ratio must be in [0, 1), got 1");
  EXPECT_EQ(error_of(-0.5, -1, "l1", {}), "--ratio must be in [0, 1), got -0.5");
  EXPECT_EQ(error_of(-1, -1, "l1", {}),
            "give either --ratio (of each layer's channels) or --flops (of the multiply-adds)");
  EXPECT_EQ(error_of(0.5, 0.5, "l1", {}),
            "give either --ratio (of each layer's channels) or --flops (of the multiply-adds)");
  EXPECT_EQ(error_of(0.5, -1, "l3", {}), "--criterion must be l1, l2 or bn, got 'l3'");
  EXPECT_EQ(error_of(0.5, -1, "l1", {"ip2"}),
            "--layers ip2: its output channels must stay as they are: a net output ('ip2')");
  EXPECT_EQ(error_of(0.5, -1, "l1", {"pool3"}),
            "--layers pool3: " + model + " has no Convolution or InnerProduct of that name");
  // 99% of every layer's channels leaves one each: not below 1% of the multiply-adds.
  EXPECT_NE(error_of(-1, 0.995, "l1", {}).find("--flops 0.995: removing 99% of the channels removes "),
            std::string::npos);
  // Only the named layer's group shrinks.
  ChannelPruneOptions o;
  o.ratio = 0.5;
  o.layers = {"conv2b"};
  const ChannelPruneResult r = prune_channels(model, weights, o);
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_EQ(r.weights.at("conv2a.0").shape(), (Shape{3, 8, 1, 1}));
  EXPECT_EQ(r.weights.at("conv1.0").shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(r.weights.at("conv3.0").shape(), (Shape{5, 11, 3, 3}));
  // Multiples of 4: 8, 6, 5 and 7 channels halved keep 4, 3 -> 4, 3 -> 4 and 4.
  o.layers.clear();
  o.multiple = 4;
  const ChannelPruneResult rounded = prune_channels(model, weights, o);
  ASSERT_EQ(rounded.groups.size(), 4u);
  for (const PrunedGroup& g : rounded.groups) EXPECT_EQ(g.kept, 4) << g.layers[0];
  o.multiple = 0;
  try {
    prune_channels(model, weights, o);
    ADD_FAILURE() << "--multiple 0 was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--multiple must be at least 1, got 0");
  }
  // Statistics are re-estimated from the TRAIN phase's data, which this net has none of.
  std::map<std::string, Tensor> w;
  try {
    recalibrate_statistics(parse_net_text(kBranchy, model).param, model, w, 5, 1);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              model + ": --recalibrate reads the TRAIN phase's data, and that phase has no data layer");
  }
}

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";
const std::string kResnet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/resnet_train_test.prototxt";

double test_accuracy(const std::string& net, const std::string& weights) {
  CmdResult t = run_cmd("test --model " + net + " --weights " + weights + " --iterations 100");
  std::smatch m;
  if (t.code != 0 || !std::regex_search(t.output, m, std::regex("accuracy = ([0-9.]+)"))) return -1;
  return std::stod(m[1]);
}

TEST(ChannelPruning, RecalibratedStatisticsRescueAPrunedResNet) {
  const std::string run = temp_path("resnet_run"), solver = temp_path("resnet_solver.prototxt");
  fs::remove_all(run);
  std::ofstream(solver) << "net: \"" << kResnet << "\"\nbase_lr: 0.05 momentum: 0.9 weight_decay: 0.0001 "
                        << "lr_policy: \"fixed\" max_iter: 150 random_seed: 1\ndisplay: 0\n";
  ASSERT_EQ(run_cmd("train --solver " + solver + " --out " + run).code, 0);
  const std::string weights = run + "/snapshots/iter_150.safetensors";
  // A tenth of every group's channels removed: the BatchNorm statistics still describe the
  // whole net, and re-estimating them over 20 training batches brings the accuracy back.
  std::map<std::string, double> accuracy;
  for (const std::string flag : {"", " --recalibrate 20"}) {
    const std::string out = temp_path("resnet_pruned");
    fs::remove_all(out);
    CmdResult p =
        run_cmd("prune-channels --model " + kResnet + " --weights " + weights + " --ratio 0.1" + flag + " -o " + out);
    ASSERT_EQ(p.code, 0) << p.output;
    EXPECT_EQ(p.output.find("Re-estimated 27 statistics blobs over 20 training batches") != std::string::npos,
              !flag.empty())
        << p.output;
    accuracy[flag] = test_accuracy(out + "/net.prototxt", out + "/weights.safetensors");
  }
  EXPECT_GE(accuracy[" --recalibrate 20"], 0.6);
  ASSERT_GE(accuracy[""], 0.0) << "the pruned net without re-estimated statistics must score";
  EXPECT_GE(accuracy[" --recalibrate 20"], accuracy[""] + 0.1) << accuracy[""];
}

TEST(ChannelPruning, LeNetLosesHalfItsConvolutionWorkAndFineTunesBack) {
  const std::string run = temp_path("lenet_run"), solver = temp_path("lenet_solver.prototxt");
  fs::remove_all(run);
  // A fixed-rate solver for `net` that tests the whole test set at `iters`.
  auto write_solver = [](const std::string& path, const std::string& net, int iters) {
    std::ofstream(path) << "net: \"" << net
                        << "\"\nbase_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" max_iter: " << iters
                        << " random_seed: 1\ntest_iter: 100 test_interval: " << iters << " display: 0\n";
  };
  write_solver(solver, kLenet, 200);
  ASSERT_EQ(run_cmd("train --solver " + solver + " --out " + run).code, 0);
  const std::string weights = run + "/snapshots/iter_200.safetensors", out = temp_path("lenet_pruned");
  fs::remove_all(out);
  CmdResult p = run_cmd("prune-channels --model " + kLenet + " --weights " + weights + " --flops 0.5 -o " + out);
  ASSERT_EQ(p.code, 0) << p.output;
  // LeNet's convolutions: 20 x 25 x 24 x 24 + 50 x 500 x 8 x 8 = 1.89M multiply-adds per image.
  EXPECT_NE(p.output.find("Convolution multiply-adds per item: 1.89M -> 0.94M (50.2% fewer)"), std::string::npos)
      << p.output;
  EXPECT_NE(p.output.find("kept whole: ip2: read by 'accuracy' (Accuracy)"), std::string::npos) << p.output;
  const TensorFile w = load_safetensors(out + "/weights.safetensors");
  EXPECT_EQ(w.find("conv1.0")->shape(), (Shape{14, 1, 5, 5}));
  EXPECT_EQ(w.find("conv2.0")->shape(), (Shape{33, 14, 5, 5}));
  EXPECT_EQ(w.find("ip1.0")->shape(), (Shape{330, 33 * 16}));
  EXPECT_EQ(w.find("ip2.0")->shape(), (Shape{10, 330}));
  // It fine-tunes from those weights (a short run here; docs/compression.md has the real one).
  const std::string ft = temp_path("lenet_ft"), ft_solver = temp_path("lenet_ft_solver.prototxt");
  fs::remove_all(ft);
  write_solver(ft_solver, out + "/net.prototxt", 100);
  CmdResult t = run_cmd("train --solver " + ft_solver + " --weights " + out + "/weights.safetensors --out " + ft);
  ASSERT_EQ(t.code, 0) << t.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t.output, m, std::regex("Final test:\\s+accuracy ([0-9.]+)"))) << t.output;
  EXPECT_GE(std::stod(m[1]), 0.75) << t.output;
  // Bad options: one line, exit code 2.
  CmdResult bad = run_cmd("prune-channels --model " + kLenet + " --weights " + weights + " --ratio 1.5 -o " + out);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--ratio must be in [0, 1), got 1.5"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace bks::test
