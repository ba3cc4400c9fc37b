// Model compression: quantization-aware training (FakeQuant, its graph pass, int8-rounded
// weights, and deploy taking the learnt ranges instead of calibrating), binary networks
// (Binarize, train --qat xnor and its XNOR kernels), magnitude pruning and knowledge
// distillation (DistillationLoss, its graph pass, train --teacher).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/dnnl_util.h"
#include "cli_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "engine/bundle.h"
#include "engine/calibrate.h"
#include "engine/compress_weights.h"
#include "engine/low_rank.h"
#include "formats/caffe_net.h"
#include "formats/graph_json.h"
#include "formats/packed_parts.h"
#include "formats/safetensors.h"
#include "op_harness.h"
#include "passes/insert_binarize.h"
#include "passes/insert_distillation.h"
#include "passes/insert_fake_quant.h"
#include "runtime/net.h"
#include "train/magnitude_pruning.h"
#include "train/weight_fake_quant.h"

namespace bks::test {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("bks_compress_" + name)).string();
}

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

// A LeNet solver at `path` (fixed rate 0.01, momentum 0.9, seed 1) that tests the whole test
// set at `max_iter`.
void write_lenet_solver(const std::string& path, int max_iter, int display) {
  std::ofstream(path) << "net: \"" << kLenet << "\"\n"
                      << "base_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" max_iter: " << max_iter
                      << " random_seed: 1\ntest_iter: 100 test_interval: " << max_iter << " display: " << display
                      << "\n";
}

// The final test accuracy `train` printed, or -1 when it printed none.
double final_accuracy(const std::string& train_output) {
  std::smatch m;
  if (!std::regex_search(train_output, m, std::regex("Final test:\\s+accuracy ([0-9.]+)"))) return -1;
  return std::stod(m[1]);
}

// x on the grid of `levels` steps per side over [-t, t], as deploy's s8 quantization rounds it.
float on_grid(float x, float t, float levels) {
  return std::clamp(std::nearbyint(x * levels / t), -levels, levels) * t / levels;
}

TEST(FakeQuant, ForwardRoundsToTheGridAndFollowsTheBatchRange) {
  OpHarness h("type: 'FakeQuant' fake_quant_param { levels: 7 moving_average_fraction: 0.75 }", {{2, 3, 5}});
  h.randomize_inputs(-2.f, 2.f);
  float m = 0.f;
  for (int64_t i = 0; i < h.in[0].numel(); ++i) m = std::max(m, std::fabs(h.in[0].f32()[i]));
  h.params[0].f32()[0] = 0.f;  // the range a net starts from (its constant filler); the harness fills at random
  h.forward();
  // The first batch sets the range.
  ASSERT_FLOAT_EQ(h.params[0].f32()[0], m);
  for (int64_t i = 0; i < h.in[0].numel(); ++i) ASSERT_FLOAT_EQ(h.out[0].f32()[i], on_grid(h.in[0].f32()[i], m, 7));
  // Later batches move it by the moving average.
  for (int64_t i = 0; i < h.in[0].numel(); ++i) h.in[0].f32()[i] *= 0.5f;
  h.forward();
  const float t = 0.75f * m + 0.25f * (0.5f * m);
  EXPECT_FLOAT_EQ(h.params[0].f32()[0], t);
  for (int64_t i = 0; i < h.in[0].numel(); ++i) ASSERT_FLOAT_EQ(h.out[0].f32()[i], on_grid(h.in[0].f32()[i], t, 7));
}

TEST(FakeQuant, TestPassesKeepTheRangeAndClipOutsideIt) {
  OpHarness h("type: 'FakeQuant'", {{4, 6}}, proto::TEST);
  h.randomize_inputs(-1.f, 1.f);
  h.params[0].f32()[0] = 0.5f;
  h.forward();
  EXPECT_EQ(h.params[0].f32()[0], 0.5f);
  int clipped = 0;
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    const float x = h.in[0].f32()[i];
    ASSERT_FLOAT_EQ(h.out[0].f32()[i], on_grid(x, 0.5f, 127)) << x;
    clipped += std::fabs(x) > 0.5f;
  }
  EXPECT_GT(clipped, 0);
  // No range yet (a layer never trained): the identity.
  h.params[0].f32()[0] = 0.f;
  h.forward();
  for (int64_t i = 0; i < h.in[0].numel(); ++i) ASSERT_EQ(h.out[0].f32()[i], h.in[0].f32()[i]);
}

// The straight-through estimator: the gradient passes unchanged where |x| <= T and stops
// where x was clipped (the forward pass is a step function: finite differences would say 0).
TEST(FakeQuant, BackwardIsTheClippedStraightThroughEstimator) {
  OpHarness h("type: 'FakeQuant' fake_quant_param { moving_average_fraction: 0.9 }", {{3, 4, 5}});
  h.randomize_inputs(-1.f, 1.f);
  h.params[0].f32()[0] = 0.4f;  // then 0.9 * 0.4 + 0.1 * max |x|
  h.forward();
  const float t = h.params[0].f32()[0];
  ASSERT_GT(t, 0.4f);
  ASSERT_LT(t, 0.5f);
  h.backward();
  int passed = 0, stopped = 0;
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    const bool inside = std::fabs(h.in[0].f32()[i]) <= t;
    ASSERT_EQ(h.in_grad[0].f32()[i], inside ? h.out_grad[0].f32()[i] : 0.f) << h.in[0].f32()[i];
    (inside ? passed : stopped)++;
  }
  EXPECT_GT(passed, 0);
  EXPECT_GT(stopped, 0);
}

TEST(FakeQuant, BadAttributesNameTheField) {
  for (const char* bad : {"levels: 0", "levels: 2.5", "moving_average_fraction: 1"}) {
    try {
      OpHarness h(std::string("type: 'FakeQuant' fake_quant_param { ") + bad + " }", {{2, 2}});
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("fake_quant_param.") + std::string(bad).substr(0, 6)),
                std::string::npos)
          << e.what();
    }
  }
}

constexpr const char* kBranchyNet = R"(
name: "branchy"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "a" type: "Convolution" bottom: "conv1" top: "a" convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "b" type: "Convolution" bottom: "conv1" top: "b" convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" bottom: "conv1" top: "sum" }
layer { name: "fc" type: "InnerProduct" bottom: "sum" top: "fc" inner_product_param { num_output: 5 transpose: true } }
)";

Graph branchy_graph() {
  const std::string path = temp_path("branchy.prototxt");
  std::ofstream(path) << kBranchyNet;
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  return build_caffe_graph(load_net_file(path), st);
}

// One FakeQuant per value read as a Convolution / InnerProduct data input, before its
// readers; other readers (the Eltwise) keep the float value.
TEST(InsertFakeQuant, OneNodePerValueBeforeItsWeightedReaders) {
  Graph g = branchy_graph();
  const PassReport r = insert_fake_quant(g);
  EXPECT_EQ(r.changes.size(), 3u);           // data, conv1 (after the in-place ReLU, read by a and b), sum
  std::map<std::string, std::string> reads;  // node -> its input 0
  for (const Node& n : g.nodes) reads[n.name] = g.values[n.inputs.empty() ? 0 : n.inputs[0]].name;
  EXPECT_EQ(reads["conv1"], "data/fake_quant");
  EXPECT_EQ(reads["a"], "conv1/fake_quant");
  EXPECT_EQ(reads["b"], "conv1/fake_quant");
  EXPECT_EQ(reads["fc"], "sum/fake_quant");
  EXPECT_EQ(reads["sum"], "a");
  const Node* sum = g.find_node("sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(g.values[sum->inputs[2]].name, "conv1") << "the Eltwise reads the float conv1";
  // conv1's FakeQuant reads the ReLU's output (the latest conv1), before a and b.
  const Node* q = g.find_node("conv1/fake_quant");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(g.nodes[g.values[q->inputs[0]].producer].name, "relu1");

  // Built into a net: its range blob is the name deploy reads the blob's threshold from.
  CpuBackend be(1);
  ParamStore store;
  Net net(std::move(g), proto::TRAIN, store, be, 1);
  int ranges = 0;
  for (const Param& p : store.all())
    if (!fake_quant_blob(p.key).empty()) {
      ++ranges;
      EXPECT_FALSE(p.learnable) << p.key;
    }
  EXPECT_EQ(ranges, 3);
  EXPECT_EQ(fake_quant_blob("conv1/fake_quant.0"), "conv1");
  EXPECT_EQ(fake_quant_blob("conv1.0"), "");
  EXPECT_EQ(fake_quant_blob("/fake_quant.0"), "");
}

// Per output channel (axis 0, or the last axis of a transposed InnerProduct): max |w| stays,
// every weight lands on the grid of its channel.
TEST(WeightFakeQuant, RoundsEachOutputChannelToItsOwnGridAndRestoresTheFloats) {
  Tensor w({3, 8});
  Rng rng(3);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = rng.uniform(-1.f, 1.f) * static_cast<float>(1 + i / 8);
  for (bool last : {false, true}) {
    Tensor q = w.clone();
    fake_quantize_weights(q, last, 7.f);
    const int64_t channels = last ? 8 : 3, per = 24 / channels;
    for (int64_t c = 0; c < channels; ++c) {
      auto at = [&](const Tensor& t, int64_t i) { return t.f32()[last ? i * channels + c : c * per + i]; };
      float m = 0.f;
      for (int64_t i = 0; i < per; ++i) m = std::max(m, std::fabs(at(w, i)));
      for (int64_t i = 0; i < per; ++i) ASSERT_FLOAT_EQ(at(q, i), on_grid(at(w, i), m, 7.f)) << c << " " << i;
    }
  }
  // Through a net: quantize() rounds conv and inner product weights (not biases), restore()
  // gives back the very floats.
  CpuBackend be(1);
  ParamStore store;
  Net net(branchy_graph(), proto::TRAIN, store, be, 1);
  for (Param& p : store.all())
    for (int64_t i = 0; i < p.data.numel(); ++i) p.data.f32()[i] = rng.uniform(-1.f, 1.f);
  std::vector<Tensor> before;
  for (const Param& p : store.all()) before.push_back(p.data.clone());
  WeightFakeQuant wq(store, net, WeightGrid::int8, 7.f);
  EXPECT_EQ(wq.layers(), 4);
  wq.quantize();
  int rounded = 0, untouched = 0;
  for (int k = 0; k < store.size(); ++k) {
    const bool weights = store.at(k).key.size() > 2 && store.at(k).key.substr(store.at(k).key.size() - 2) == ".0" &&
                         fake_quant_blob(store.at(k).key).empty();
    bool same = true;
    for (int64_t i = 0; i < before[k].numel(); ++i) same = same && before[k].f32()[i] == store.at(k).data.f32()[i];
    (weights ? rounded : untouched) += weights ? !same : same;
  }
  EXPECT_EQ(rounded, 4);
  EXPECT_EQ(untouched, store.size() - 4);
  wq.restore();
  for (int k = 0; k < store.size(); ++k)
    for (int64_t i = 0; i < before[k].numel(); ++i) ASSERT_EQ(before[k].f32()[i], store.at(k).data.f32()[i]);
}

// Binary: each output channel becomes +-(its mean |w|) by sign; power of two: +-2^k with k
// within 8 exponents of the channel's largest, the nearest in log scale, 0 below.
TEST(WeightFakeQuant, BinaryAndPowerOfTwoGridsPerOutputChannel) {
  Tensor w({3, 8});
  Rng rng(4);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = rng.uniform(-1.f, 1.f) * static_cast<float>(1 + i / 8);
  w.f32()[5] = 0.f;
  for (bool last : {false, true}) {
    Tensor b = w.clone(), p = w.clone();
    binarize_weights(b, last);
    power_of_two_weights(p, last);
    const int64_t channels = last ? 8 : 3, per = 24 / channels;
    for (int64_t c = 0; c < channels; ++c) {
      auto at = [&](const Tensor& t, int64_t i) { return t.f32()[last ? i * channels + c : c * per + i]; };
      double mean = 0;
      float m = 0.f;
      for (int64_t i = 0; i < per; ++i) {
        mean += std::fabs(at(w, i)) / static_cast<double>(per);
        m = std::max(m, std::fabs(at(w, i)));
      }
      const double top = std::nearbyint(std::log2(m));
      for (int64_t i = 0; i < per; ++i) {
        const float x = at(w, i);
        ASSERT_FLOAT_EQ(at(b, i), x < 0.f ? -static_cast<float>(mean) : static_cast<float>(mean)) << c << " " << i;
        // The power nearest x in log scale, clamped to [top - 7, top]; 0 half a step below.
        const double k = std::log2(std::fabs(x));
        const float want =
            x == 0.f || k < top - 7.5 ? 0.f : std::copysign(std::exp2(std::clamp(std::nearbyint(k), top - 7, top)), x);
        ASSERT_FLOAT_EQ(at(p, i), want) << c << " " << i << " " << x;
      }
    }
  }
  // Beside a weight of 1: 2^-7 is the smallest power kept, 0.003 (2^-8.4) becomes 0, and
  // the cut is half a step below 2^-7: 0.006 (2^-7.38) rounds up to it, 0.005 (2^-7.64) goes.
  Tensor t({1, 6});
  t.f32()[0] = 1.f, t.f32()[1] = -0.003f, t.f32()[2] = -0.3f, t.f32()[3] = 0.008f;
  t.f32()[4] = 0.006f, t.f32()[5] = -0.005f;
  power_of_two_weights(t, false);
  EXPECT_EQ(t.f32()[0], 1.f);
  EXPECT_EQ(t.f32()[1], 0.f);
  EXPECT_EQ(t.f32()[2], -0.25f);
  EXPECT_EQ(t.f32()[3], 0.0078125f);
  EXPECT_EQ(t.f32()[4], 0.0078125f);
  EXPECT_EQ(t.f32()[5], 0.f);
  EXPECT_THROW(weight_grid("ternary"), InputError);
}

// End to end: LeNet trained with --qat int8 deploys to INT8 from the ranges it learnt (no
// calibration pass), and the INT8 bundle scores as the fake-quantized training net did.
TEST(QuantizationAwareTraining, LeNetDeploysToInt8FromTheRangesItLearnt) {
  const std::string solver = temp_path("qat_solver.prototxt"), run = temp_path("qat_run");
  const std::string& model = kLenet;
  fs::remove_all(run);
  write_lenet_solver(solver, 400, 0);
  CmdResult bad = run_cmd("train --solver " + solver + " --qat int4 --out " + run);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--qat int4"), std::string::npos) << bad.output;

  CmdResult t = run_cmd("train --solver " + solver + " --qat int8 --out " + run);
  ASSERT_EQ(t.code, 0) << t.output;
  const double trained = final_accuracy(t.output);
  ASSERT_GE(trained, 0) << t.output;

  // The snapshot keeps the float weights and one learnt range per quantized blob.
  const std::string weights = run + "/snapshots/iter_400.safetensors";
  const TensorFile f = load_safetensors(weights);
  std::map<std::string, float> ranges;
  for (const auto& [key, tensor] : f.tensors)
    if (!fake_quant_blob(key).empty()) ranges[fake_quant_blob(key)] = tensor.f32()[0];
  EXPECT_EQ(ranges.size(), 4u);  // the inputs of conv1, conv2, ip1, ip2
  for (const auto& [blob, t] : ranges) EXPECT_GT(t, 0.f) << blob;

  const std::string bundle = temp_path("qat.bks");
  CmdResult d = run_cmd("deploy --model " + model + " --weights " + weights +
                        " --precision int8 --int8-layers all --batch 100 -o " + bundle);
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("learnt by quantization-aware training (no calibration pass): 4 tensors"), std::string::npos)
      << d.output;
  EXPECT_NE(d.output.find("int8: 4 convolution / inner product layer(s) quantized"), std::string::npos) << d.output;
  const Bundle b = load_bundle(bundle);
  const CalibrationTable table = CalibrationTable::from_json(b.info.at("calibration"), bundle);
  EXPECT_EQ(table.method, "qat");
  ASSERT_EQ(table.threshold.size(), ranges.size());
  for (const auto& [blob, t] : ranges) EXPECT_FLOAT_EQ(static_cast<float>(table.threshold.at(blob)), t) << blob;

  CmdResult s = run_cmd("test --model " + bundle + " --iterations 100");
  ASSERT_EQ(s.code, 0) << s.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(s.output, m, std::regex("accuracy = ([0-9.]+)"))) << s.output;
  const double int8 = std::stod(m[1]);
  EXPECT_GE(int8, 0.75) << s.output;
  EXPECT_NEAR(int8, trained, 0.01) << "the INT8 bundle against the fake-quantized test net";

  // Weights trained without --qat still need a calibration source, and the error says how.
  const std::string fp32_run = temp_path("qat_fp32_run");
  fs::remove_all(fp32_run);
  std::ofstream(solver) << "net: \"" << model << "\"\nbase_lr: 0.01 lr_policy: \"fixed\" max_iter: 1 random_seed: 1\n";
  ASSERT_EQ(run_cmd("train --solver " + solver + " --out " + fp32_run).code, 0);
  CmdResult c = run_cmd("deploy --model " + model + " --weights " + fp32_run +
                        "/snapshots/iter_1.safetensors --precision int8 -o " + temp_path("x.bks"));
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_NE(c.output.find("train --qat int8"), std::string::npos) << c.output;
}

// Whether every output channel (axis 0) of `w` holds one magnitude.
bool binary_channels(const Tensor& w) {
  const int64_t per = w.numel() / w.dim(0);
  for (int64_t c = 0; c < w.dim(0); ++c)
    for (int64_t i = 0; i < per; ++i)
      if (std::fabs(w.f32()[c * per + i]) != std::fabs(w.f32()[c * per])) return false;
  return true;
}

// train --qat binary / pow2: the test net sees the weights on their grid; the snapshot
// keeps the floats and names the grid, and deploy rounds them alike, so the FP32 bundle
// scores what training reported. Binary leaves the first and the last layer float unless
// --qat-every-layer; pow2 rounds every layer.
TEST(QuantizationAwareTraining, BinaryAndPowerOfTwoSnapshotsDeployOnTheirGrid) {
  for (const std::string qat : {"binary", "pow2", "binary --qat-every-layer"}) {
    const bool pow2 = qat == "pow2", ends_float = qat == "binary";
    const std::string tag = qat.substr(0, qat.find(' ')) + (ends_float || pow2 ? "" : "_all");
    const std::string solver = temp_path(tag + "_solver.prototxt"), run = temp_path(tag + "_run");
    fs::remove_all(run);
    write_lenet_solver(solver, 200, 0);
    CmdResult t = run_cmd("train --solver " + solver + " --qat " + qat + " --out " + run);
    ASSERT_EQ(t.code, 0) << t.output;
    EXPECT_EQ(t.output.find("conv1.0, ip2.0 stay float") != std::string::npos, ends_float) << t.output;
    const double trained = final_accuracy(t.output);
    EXPECT_GE(trained, 0.6) << t.output;
    const std::string weights = run + "/snapshots/iter_200.safetensors";
    const TensorFile f = load_safetensors(weights);
    EXPECT_EQ(f.metadata.at("weight_grid"), qat.substr(0, qat.find(' ')));
    EXPECT_EQ(f.metadata.count("weight_grid_float") ? f.metadata.at("weight_grid_float") : "",
              ends_float ? R"(["conv1.0","ip2.0"])" : "");
    const std::string bundle = temp_path(tag + ".bks");
    CmdResult d = run_cmd("deploy --model " + kLenet + " --weights " + weights + " --batch 100 -o " + bundle);
    ASSERT_EQ(d.code, 0) << d.output;
    EXPECT_TRUE(std::regex_search(d.output, std::regex("pass weight-grid +4 change"))) << d.output;
    const Bundle b = load_bundle(bundle);
    if (pow2) {  // every magnitude a power of two
      for (const char* key : {"conv1.0", "conv2.0"}) {
        const Tensor& w = b.weights.at(key);
        for (int64_t i = 0; i < w.numel(); ++i) {
          const float x = std::fabs(w.f32()[i]);
          ASSERT_TRUE(x == 0.f || std::exp2(std::round(std::log2(x))) == x) << key << " " << x;
        }
      }
    } else {  // binary: one magnitude a filter, conv1 float when the ends stay float
      EXPECT_TRUE(binary_channels(b.weights.at("conv2.0")));
      EXPECT_EQ(binary_channels(b.weights.at("conv1.0")), !ends_float);
    }
    CmdResult s = run_cmd("test --model " + bundle + " --iterations 100");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(s.output, m, std::regex("accuracy = ([0-9.]+)"))) << s.output;
    EXPECT_NEAR(std::stod(m[1]), trained, 0.002) << qat << ": the bundle against the training's test net";
    if (ends_float) {  // a crafted list of float layers: one clear error
      std::vector<std::pair<std::string, const Tensor*>> tensors;
      for (const auto& [name, tensor] : f.tensors) tensors.emplace_back(name, &tensor);
      auto meta = f.metadata;
      meta["weight_grid_float"] = "{\"conv1.0\": 1}";
      const std::string crafted = temp_path("crafted_grid.safetensors");
      save_safetensors(crafted, tensors, meta);
      CmdResult c = run_cmd("deploy --model " + kLenet + " --weights " + crafted + " -o " + temp_path("c.bks"));
      EXPECT_EQ(c.code, 2) << c.output;
      EXPECT_NE(c.output.find("'weight_grid_float' is not a JSON list"), std::string::npos) << c.output;
    }
  }
  CmdResult bad = run_cmd("train --solver " + temp_path("pow2_solver.prototxt") + " --qat pow2 --qat-every-layer");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--qat-every-layer goes with --qat binary"), std::string::npos) << bad.output;
}

// XNOR-Net's activations: +-1 by sign forward; backward passes the gradient where |x| <= 1
// (hard tanh's straight-through estimator) and stops it elsewhere.
TEST(Binarize, ForwardIsTheSignAndBackwardTheHardTanhStraightThroughEstimator) {
  OpHarness h("type: 'Binarize'", {{3, 4, 5}});
  h.randomize_inputs(-2.f, 2.f);
  h.in[0].f32()[0] = 0.f;  // zero is +1, as the kernels' bits take it
  h.forward();
  h.backward();
  int passed = 0, stopped = 0;
  for (int64_t i = 0; i < h.in[0].numel(); ++i) {
    const float x = h.in[0].f32()[i];
    ASSERT_EQ(h.out[0].f32()[i], x >= 0.f ? 1.f : -1.f) << x;
    const bool inside = std::fabs(x) <= 1.f;
    ASSERT_EQ(h.in_grad[0].f32()[i], inside ? h.out_grad[0].f32()[i] : 0.f) << x;
    (inside ? passed : stopped)++;
  }
  EXPECT_GT(passed, 0);
  EXPECT_GT(stopped, 0);
}

// train --qat xnor: LeNet's inner layers (conv2, ip1) read signs and learn binary weights;
// deploy makes them BinaryConvolution / BinaryInnerProduct on the XNOR + popcount kernels,
// keeps conv1 and ip2 in float, and the bundle scores what training reported.
TEST(QuantizationAwareTraining, XnorLeNetDeploysOntoTheXnorKernelsAndScoresAsTrained) {
  const std::string solver = temp_path("xnor_solver.prototxt"), run = temp_path("xnor_run");
  fs::remove_all(run);
  write_lenet_solver(solver, 300, 0);
  CmdResult t = run_cmd("train --solver " + solver + " --qat xnor --out " + run);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("2 of them binary inputs"), std::string::npos) << t.output;
  const double trained = final_accuracy(t.output);
  EXPECT_GE(trained, 0.6) << t.output;
  const std::string weights = run + "/snapshots/iter_300.safetensors";
  EXPECT_EQ(load_safetensors(weights).metadata.at("weight_grid"), "xnor");
  const std::string bundle = temp_path("xnor.bks");
  CmdResult d = run_cmd("deploy --model " + kLenet + " --weights " + weights + " --batch 100 -o " + bundle);
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_TRUE(std::regex_search(d.output, std::regex("pass insert-binarize +2 change"))) << d.output;
  EXPECT_TRUE(std::regex_search(d.output, std::regex("pass binarize-layers +2 change"))) << d.output;
  const Bundle b = load_bundle(bundle);
  std::map<std::string, std::string> types;
  for (const Node& n : b.graph.nodes) types[n.name] = n.type;
  EXPECT_EQ(types["conv1"], "Convolution");
  EXPECT_EQ(types["conv2"], "BinaryConvolution");
  EXPECT_EQ(types["ip1"], "BinaryInnerProduct");
  EXPECT_EQ(types["ip2"], "InnerProduct");
  for (const auto& [name, type] : types) EXPECT_NE(type, "Binarize") << name << ": its readers took its input";
  CmdResult s = run_cmd("test --model " + bundle + " --iterations 100");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(s.output, m, std::regex("accuracy = ([0-9.]+)"))) << s.output;
  EXPECT_NEAR(std::stod(m[1]), trained, 0.003) << "the XNOR bundle against the training's test net";
  CmdResult k = run_cmd("bench " + bundle + " --iterations 2 --layers");
  EXPECT_NE(k.output.find("XNOR + popcount"), std::string::npos) << k.output;
}

TEST(MagnitudePruning, ScheduleRampsCubicallyAndChecksItsOptions) {
  PruningSchedule s{0.8, 100, 300, 50};
  EXPECT_EQ(s.at(0), 0.0);
  EXPECT_EQ(s.at(100), 0.0);
  EXPECT_DOUBLE_EQ(s.at(200), 0.8 * (1 - 0.125));  // half way: 1 - (1/2)^3 of the way
  EXPECT_DOUBLE_EQ(s.at(300), 0.8);
  EXPECT_DOUBLE_EQ(s.at(1000), 0.8);
  EXPECT_NO_THROW(s.check(300));
  auto fails = [](PruningSchedule p, const std::string& option) {
    try {
      p.check(1000);
      ADD_FAILURE() << option;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
  };
  fails({1.0, 0, 10, 1}, "--prune 1");
  fails({-0.1, 0, 10, 1}, "--prune -0.1");
  fails({0.5, 10, 10, 1}, "--prune-until 10");
  fails({0.5, 0, 2000, 1}, "--prune-until 2000");
  fails({0.5, 0, 10, 0}, "--prune-every 0");
}

// Exactly round(fraction * n) zeros, the smallest |w| (zeros of w among them, ties by position).
TEST(MagnitudePruning, MaskKeepsTheLargestMagnitudes) {
  Tensor w({10});
  const float v[] = {0.5f, -0.1f, 0.f, 0.3f, -0.9f, 0.1f, 0.2f, -0.4f, 0.05f, 0.7f};
  std::copy(v, v + 10, w.f32());
  const std::vector<uint8_t> keep = magnitude_mask(w, 0.45);  // 4.5 -> 5 pruned (llround)
  EXPECT_EQ(std::count(keep.begin(), keep.end(), 0), 5);
  // Pruned: 0 (index 2), 0.05, then the tie 0.1 / -0.1 (both), then 0.2.
  for (int i : {2, 8, 1, 5, 6}) EXPECT_EQ(keep[i], 0) << i;
  for (int i : {0, 3, 4, 7, 9}) EXPECT_EQ(keep[i], 1) << i;
  // A count that splits the tie: 3 pruned are 0, 0.05 and the first of -0.1 / 0.1.
  const std::vector<uint8_t> split = magnitude_mask(w, 0.3);
  EXPECT_EQ(std::count(split.begin(), split.end(), 0), 3);
  for (int i : {2, 8, 1}) EXPECT_EQ(split[i], 0) << i;
  EXPECT_EQ(split[5], 1);
  const std::vector<uint8_t> none = magnitude_mask(w, 0.0);
  EXPECT_EQ(std::count(none.begin(), none.end(), 0), 0);
}

// Through the trainer's calls: masks follow the schedule, pruned weights stay zero when the
// solver moves them, and a new instance (a resumed run) takes the zeros as its masks.
TEST(MagnitudePruning, PrunedWeightsStayZeroAndResumeKeepsTheMasks) {
  CpuBackend be(1);
  ParamStore store;
  Net net(branchy_graph(), proto::TRAIN, store, be, 1);
  Rng rng(9);
  for (Param& p : store.all())
    for (int64_t i = 0; i < p.data.numel(); ++i) p.data.f32()[i] = rng.uniform(-1.f, 1.f);
  const PruningSchedule s{0.75, 0, 40, 10, "layer"};  // each blob on its own
  auto pruning = std::make_unique<MagnitudePruning>(store, net, s);
  EXPECT_EQ(pruning->layers(), 4);
  pruning->start(0);
  auto nudge = [&] {  // a solver step: every weight moves
    for (Param& p : store.all())
      for (int64_t i = 0; i < p.data.numel(); ++i) p.data.f32()[i] += rng.uniform(-0.01f, 0.01f);
  };
  for (int64_t iter = 1; iter <= 25; ++iter) {
    nudge();
    pruning->after_step(iter);
  }
  EXPECT_NEAR(pruning->sparsity(), s.at(20), 0.02) << "masks of iteration 20 until 30";
  // Resumed at 25: the zeros are the masks.
  pruning = std::make_unique<MagnitudePruning>(store, net, s);
  pruning->start(25);
  for (int64_t iter = 26; iter <= 60; ++iter) {
    nudge();
    pruning->after_step(iter);
    if (iter == 29) {
      EXPECT_NEAR(pruning->sparsity(), s.at(20), 0.02) << "no new masks before iteration 30";
    }
  }
  EXPECT_NEAR(pruning->sparsity(), 0.75, 0.01);
  for (const char* key : {"conv1.0", "a.0", "b.0", "fc.0"}) {
    const Tensor& w = store.at(store.find(key)).data;
    EXPECT_EQ(std::count(w.f32(), w.f32() + w.numel(), 0.f), std::llround(0.75 * static_cast<double>(w.numel())))
        << key;
  }
  // Biases are not pruned.
  for (const Param& p : store.all())
    if (p.key.size() > 2 && p.key.substr(p.key.size() - 2) == ".1") {
      for (int64_t i = 0; i < p.data.numel(); ++i) ASSERT_NE(p.data.f32()[i], 0.f) << p.key;
    }
}

// Ranked together, the blobs keep different shares: exactly the fraction overall, and a blob
// of larger weights keeps more of them.
TEST(MagnitudePruning, GlobalRankingPrunesSmallWeightsWhereverTheyAre) {
  Tensor small({100}), large({100});
  Rng rng(4);
  for (int64_t i = 0; i < 100; ++i) small.f32()[i] = rng.uniform(-0.1f, 0.1f), large.f32()[i] = rng.uniform(-1.f, 1.f);
  const auto keep = magnitude_masks({&small, &large}, 0.5);
  const auto zeros = [](const std::vector<uint8_t>& k) { return std::count(k.begin(), k.end(), 0); };
  EXPECT_EQ(zeros(keep[0]) + zeros(keep[1]), 100);
  EXPECT_GT(zeros(keep[0]), 80);  // the small blob loses most of its weights, the large few
  EXPECT_LT(zeros(keep[1]), 20);
  float largest_pruned = 0.f, smallest_kept = 1.f;
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; i < 100; ++i) {
      const float m = std::fabs((k ? large : small).f32()[i]);
      if (keep[k][i])
        smallest_kept = std::min(smallest_kept, m);
      else
        largest_pruned = std::max(largest_pruned, m);
    }
  EXPECT_LE(largest_pruned, smallest_kept);
}

// LAMP: w^2 over the sum of w'^2 of its blob's weights at least as large. Ranked together,
// a blob scaled down tenfold (as BatchNorm lets a convolution be) keeps as many weights as
// the same blob at full scale, where magnitude ranking would empty it.
TEST(MagnitudePruning, LampScoresAreScaleFreePerBlob) {
  Tensor w({4});
  const float v[] = {-3.f, 1.f, 0.f, 2.f};
  std::copy(v, v + 4, w.f32());
  const std::vector<float> s = lamp_scores(w);
  EXPECT_FLOAT_EQ(s[0], 1.f);
  EXPECT_FLOAT_EQ(s[1], 1.f / 14.f);
  EXPECT_FLOAT_EQ(s[2], 0.f);
  EXPECT_FLOAT_EQ(s[3], 4.f / 13.f);
  Tensor large({100}), small({100});
  Rng rng(4);
  for (int64_t i = 0; i < 100; ++i) large.f32()[i] = rng.uniform(-1.f, 1.f), small.f32()[i] = 0.1f * large.f32()[i];
  const auto zeros = [](const std::vector<uint8_t>& k) { return std::count(k.begin(), k.end(), 0); };
  const auto lamp = lamp_masks({&small, &large}, 0.5);
  EXPECT_EQ(zeros(lamp[0]), 50);
  EXPECT_EQ(zeros(lamp[1]), 50);
  EXPECT_EQ(lamp[0], lamp[1]);                                      // the same weights of each
  EXPECT_GT(zeros(magnitude_masks({&small, &large}, 0.5)[0]), 90);  // magnitude: the small blob nearly emptied
}

// Through the trainer's hook: with one blob's weights a hundred times smaller (as a layer
// before BatchNorm may have them), magnitude ranking empties it and LAMP does not.
TEST(MagnitudePruning, LampScopeKeepsAShrunkenLayer) {
  for (const std::string scope : {"global", "lamp"}) {
    CpuBackend be(1);
    ParamStore store;
    Net net(branchy_graph(), proto::TRAIN, store, be, 1);
    Rng rng(9);
    for (Param& p : store.all())
      for (int64_t i = 0; i < p.data.numel(); ++i)
        p.data.f32()[i] = rng.uniform(-1.f, 1.f) * (p.key == "b.0" ? 0.01f : 1.f);
    MagnitudePruning pruning(store, net, PruningSchedule{0.5, 0, 1, 1, scope});
    pruning.start(0);
    pruning.after_step(1);
    const Tensor& b = store.at(store.find("b.0")).data;
    const double zeros = static_cast<double>(std::count(b.f32(), b.f32() + b.numel(), 0.f)) / b.numel();
    if (scope == "global")
      EXPECT_EQ(zeros, 1.0);
    else
      EXPECT_LT(zeros, 0.9);
    EXPECT_NEAR(pruning.sparsity(), 0.5, 0.01) << scope;
  }
}

// End to end: LeNet pruned to 90% zeros (over its weight blobs together) while it trains, to
// a real accuracy, with the sparsity in metrics.jsonl; bad options are clear errors.
TEST(MagnitudePruning, LeNetTrainsToNinetyPercentZeros) {
  const std::string solver = temp_path("prune_solver.prototxt"), run = temp_path("prune_run");
  fs::remove_all(run);
  write_lenet_solver(solver, 500, 100);
  // Each bad option is the trainer's own error naming it, not the option parser's.
  const std::pair<std::string, std::string> bad_options[] = {
      {"--prune 1.5", "--prune 1.5: the sparsity must be in [0, 1)"},
      {"--prune -0.5", "--prune -0.5: the sparsity must be in [0, 1)"},
      {"--prune 0.5 --prune-until 600", "--prune-until 600: after the solver's max_iter 500"},
      {"--prune-every 5", "--prune-from, --prune-until and --prune-every go with --prune SPARSITY"}};
  for (const auto& [bad, message] : bad_options) {
    CmdResult r = run_cmd("train --solver " + solver + " " + bad + " --out " + run);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << bad << "\n" << r.output;
  }
  fs::remove_all(run);
  CmdResult t = run_cmd("train --solver " + solver + " --prune 0.9 --prune-until 300 --prune-every 50 --out " + run);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_GE(final_accuracy(t.output), 0.75) << t.output;
  const TensorFile f = load_safetensors(run + "/snapshots/iter_500.safetensors");
  int64_t zeros = 0, all = 0;
  for (const char* key : {"conv1.0", "conv2.0", "ip1.0", "ip2.0"}) {
    const Tensor* w = f.find(key);
    ASSERT_NE(w, nullptr) << key;
    const int64_t z = std::count(w->f32(), w->f32() + w->numel(), 0.f);
    EXPECT_GT(z, 0) << key;
    EXPECT_LT(z, w->numel()) << key << " emptied";
    zeros += z;
    all += w->numel();
  }
  EXPECT_EQ(zeros, std::llround(0.9 * static_cast<double>(all)));
  std::ifstream metrics(run + "/metrics.jsonl");
  std::string line, last_train;
  while (std::getline(metrics, line))
    if (line.find("\"phase\":\"train\"") != std::string::npos) last_train = line;
  EXPECT_NE(last_train.find("\"weight_sparsity\":0.9"), std::string::npos) << last_train;
}

// `test` on a bundle: its top-1 and top-5 accuracy as printed.
std::pair<std::string, std::string> bundle_scores(const std::string& bundle) {
  CmdResult t = run_cmd("test --model " + bundle + " --iterations 20");
  EXPECT_EQ(t.code, 0) << t.output;
  std::smatch a, l;
  EXPECT_TRUE(std::regex_search(t.output, a, std::regex("accuracy = ([0-9.]+)"))) << t.output;
  EXPECT_TRUE(std::regex_search(t.output, l, std::regex("accuracy_top5 = ([0-9.]+)"))) << t.output;
  return {a.size() > 1 ? a[1].str() : "", l.size() > 1 ? l[1].str() : ""};
}

// deploy --compress stores a 90%-pruned LeNet in a fraction of the dense bundle's room, and
// the bundle scores as the dense one: in FP32 the coding is lossless, and in INT8 the kernels
// find the int8 levels and scales they computed from the dense weights.
TEST(CompressedBundle, PrunedLeNetIsSmallAndScoresAsTheDenseBundle) {
  const std::string solver = temp_path("packed_solver.prototxt"), run = temp_path("packed_run");
  fs::remove_all(run);
  write_lenet_solver(solver, 300, 0);
  ASSERT_EQ(run_cmd("train --solver " + solver + " --prune 0.9 --prune-until 200 --prune-every 50 --out " + run).code,
            0);
  const std::string weights = run + "/snapshots/iter_300.safetensors";
  auto deploy = [&](const std::string& flags, const std::string& out) {
    CmdResult d =
        run_cmd("deploy --model " + kLenet + " --weights " + weights + " --batch 100 " + flags + " -o " + out);
    EXPECT_EQ(d.code, 0) << d.output;
    return d.output;
  };
  const std::string dense = temp_path("dense.bks"), packed = temp_path("packed.bks");
  deploy("", dense);
  const std::string said = deploy("--compress", packed);
  EXPECT_NE(said.find("compressed: 1.724 MB of weights stored in"), std::string::npos) << said;
  EXPECT_NE(said.find("ip1.0"), std::string::npos) << said;
  EXPECT_NE(said.find("sparse f32"), std::string::npos) << said;
  // 10% of the floats, their exponent bytes coded, plus a bit per weight: about a ninth.
  EXPECT_LT(fs::file_size(packed) * 7, fs::file_size(dense)) << fs::file_size(packed);
  const auto dense_scores = bundle_scores(dense);
  EXPECT_EQ(bundle_scores(packed), dense_scores);
  const Bundle d = load_bundle(dense), p = load_bundle(packed);
  EXPECT_EQ(p.coded.size(), 8u);  // 4 weights, 4 biases
  EXPECT_EQ(p.info.count("coded_weights"), 0u);
  ASSERT_EQ(p.weights.size(), d.weights.size());
  for (const auto& [name, t] : d.weights) {
    const Tensor& u = p.weights.at(name);
    ASSERT_EQ(u.shape(), t.shape()) << name;
    EXPECT_TRUE(std::equal(t.f32(), t.f32() + t.numel(), u.f32())) << name;  // -0 == +0
  }

  // ip1 (90% zeros) was timed sparse against dense, and deploy kept the faster (which this
  // test does not assume); ip2 (half its weights) was too dense to try. Forced to run
  // sparse, both score as the dense bundle.
  Bundle forced = load_bundle(packed);
  for (Node& n : forced.graph.nodes) {
    if (n.name == "ip1") {
      EXPECT_TRUE(n.deploy.kernel == "sparse" || n.deploy.kernel == "direct") << n.deploy.kernel;
    }
    if (n.name == "ip2") {
      EXPECT_EQ(n.deploy.kernel, "");
    }
    if (n.type == "InnerProduct") n.deploy.kernel = "sparse";
  }
  const std::string sparse = temp_path("sparse.bks");
  save_bundle(sparse, forced);
  CmdResult v = run_cmd("bench " + sparse + " --layers --iterations 1");
  EXPECT_TRUE(std::regex_search(v.output, std::regex("ip1 +InnerProduct .*sparse CSR"))) << v.output;
  const auto [acc, top5] = bundle_scores(sparse);
  EXPECT_NEAR(std::stod(acc), std::stod(dense_scores.first), 0.001);

  // INT8: the layers' int8 levels, a bit per weight for the mask, deflated.
  const std::string int8 = " --precision int8 --int8-layers all --calib test --calib-batches 2 --calib-method minmax";
  const std::string dense8 = temp_path("dense8.bks"), packed8 = temp_path("packed8.bks");
  deploy(int8, dense8);
  const std::string said8 = deploy(int8 + " --compress", packed8);
  EXPECT_NE(said8.find("sparse int8 grid"), std::string::npos) << said8;
  EXPECT_LT(fs::file_size(packed8) * 15, fs::file_size(dense8)) << fs::file_size(packed8);
  EXPECT_EQ(bundle_scores(packed8), bundle_scores(dense8));

  // --weight-bits 5 (lossy, as Deep Compression's weight sharing): each output channel's
  // weights on 15 levels each side of zero, the INT8 layers' too. Smaller again, and about
  // as accurate. At 8 bits the channels hold more distinct values than 5 bits allow.
  const std::string bits5 = temp_path("bits5.bks");
  const std::string said5 = deploy(int8 + " --compress --weight-bits 5", bits5);
  EXPECT_NE(said5.find("weights on 5-bit per-channel grids: lossy"), std::string::npos) << said5;
  EXPECT_LT(fs::file_size(bits5), fs::file_size(packed8));
  // The most distinct nonzero magnitudes in one output channel of `t` (`outputs` channels).
  auto most_levels = [](const Tensor& t, int64_t outputs) {
    const bool first = t.shape()[0] == outputs;  // else channels are the last axis (transposed)
    std::vector<std::set<float>> seen(static_cast<size_t>(outputs));
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.f32()[i] != 0.f)
        seen[static_cast<size_t>(first ? i / (t.numel() / outputs) : i % outputs)].insert(std::fabs(t.f32()[i]));
    size_t most = 0;
    for (const auto& s : seen) most = std::max(most, s.size());
    return most;
  };
  const Bundle q5 = load_bundle(bits5), q8 = load_bundle(packed8);
  for (const auto& [layer, outputs] : {std::pair<std::string, int64_t>{"conv2.0", 50}, {"ip1.0", 500}}) {
    EXPECT_LE(most_levels(q5.weights.at(layer), outputs), 15u) << layer;
    EXPECT_GT(most_levels(q8.weights.at(layer), outputs), 15u) << layer;
  }
  EXPECT_NEAR(std::stod(bundle_scores(bits5).first), std::stod(bundle_scores(packed8).first), 0.01);
  for (const auto& [flags, message] :
       {std::pair<std::string, std::string>{"--compress --weight-bits 9", "--weight-bits must be in [2, 8], got 9"},
        {"--weight-bits 5", "--weight-bits is for --compress"}}) {
    CmdResult bad = run_cmd("deploy --model " + kLenet + " --weights " + weights + " " + flags + " -o " + bits5);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << bad.output;
  }

  // A changed byte in a coded tensor: one line naming the file and the tensor, exit code 2.
  std::string bytes;
  {
    std::ifstream f(packed, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t first = bytes.find("BKW2");
  ASSERT_NE(first, std::string::npos);
  bytes[first + 60] = static_cast<char>(bytes[first + 60] ^ 1);
  const std::string broken = temp_path("broken.bks");
  std::ofstream(broken, std::ios::binary) << bytes;
  CmdResult b = run_cmd("test --model " + broken + " --iterations 1");
  EXPECT_EQ(b.code, 2) << b.output;
  EXPECT_EQ(std::count(b.output.begin(), b.output.end(), '\n'), 1) << b.output;
  EXPECT_NE(b.output.find(broken + ": tensor 'conv1.0': corrupt coded tensor"), std::string::npos) << b.output;
}

// Coded tensors of a few bytes each that claim shapes summing to far more than any
// machine's memory: refused before anything decodes, naming the file. In format 4 the
// shapes are in the packed index; in format 3 (still read), in the metadata.
TEST(Compression, CodedWeightsLargerThanMemoryAreRefusedBeforeDecoding) {
  proto::NetState st;
  st.set_phase(proto::TEST);
  const Graph g = build_caffe_graph(load_net_file(kLenet), st);
  for (int version : {3, 4}) {
    Tensor small({16}, DType::u8);
    std::vector<std::pair<std::string, const Tensor*>> tensors;
    nlohmann::json shapes = nlohmann::json::object();
    PackedParts parts;
    parts.strings["graph"] = graph_to_json(g);
    for (int k = 0; k < 64; ++k) {
      tensors.emplace_back(fmt::format("w{}", k), &small);
      shapes[fmt::format("w{}", k)] = {int64_t{1} << 34};  // 64 GiB each, 4 TiB in all
      parts.blobs.push_back({fmt::format("w{}", k), {int64_t{1} << 34}, std::string(16, '\0')});
    }
    const std::string packed_bytes = pack_parts(parts);
    Tensor packed({static_cast<int64_t>(packed_bytes.size())}, DType::u8);
    std::copy(packed_bytes.begin(), packed_bytes.end(), packed.data<char>());
    const std::string path = temp_path(fmt::format("claims_terabytes_{}.bks", version));
    if (version == 3)
      save_safetensors(
          path, tensors,
          {{"bakusoku_bundle_version", "3"}, {"graph", graph_to_json(g)}, {"coded_weights", shapes.dump()}});
    else
      save_safetensors(path, {{"bakusoku_packed", &packed}}, {{"bakusoku_bundle_version", "4"}});
    const std::string error = input_error_of([&] { load_bundle(path); });
    EXPECT_NE(error.find(path + ": corrupt bundle: its coded weights would decode to 4398"), std::string::npos)
        << "format " << version << ": " << error;
  }
}

// A bundle written before packing (format 3, its coded tensors BKW1) still loads, to the
// weights and graph that the same deploy writes today (format 4, BKW2): the fuzz seeds of
// both formats (tests/fuzz/make_corpus.sh), one net deployed in FP32 and INT8. The INT8
// pair came from CPUs with different int8 grids (63 and 127 levels) and calibrations, so
// its weights agree to within a step of the coarser grid.
TEST(Compression, Format3BundlesLoadAsTheirFormat4Twins) {
  const std::string dir = std::string(BKS_SOURCE_DIR) + "/tests/fuzz/corpus/bundle/";
  for (const std::string precision : {"fp32", "int8"}) {
    const Bundle v3 = load_bundle(dir + "ip_coded_" + precision + "_v3.bks");
    const Bundle v4 = load_bundle(dir + "ip_coded_" + precision + ".bks");
    ASSERT_EQ(v3.weights.size(), 2u) << precision;
    ASSERT_EQ(v4.weights.size(), 2u) << precision;
    EXPECT_EQ(v3.coded.size(), 2u) << precision;
    for (const auto& [name, t] : v4.weights) {
      const Tensor& old = v3.weights.at(name);
      ASSERT_EQ(old.shape(), t.shape()) << name;
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (precision == "fp32") {
          EXPECT_EQ(old.f32()[i], t.f32()[i]) << name << " " << i;
        } else {
          EXPECT_NEAR(old.f32()[i], t.f32()[i], 0.75 / 63) << name << " " << i;
        }
      }
    }
    EXPECT_EQ(v3.info.at("precision"), v4.info.at("precision"));
    if (precision == "fp32") {
      EXPECT_EQ(graph_to_json(v3.graph), graph_to_json(v4.graph));
    }
    // Saved again (as format 4), the bundle holds the same coded bytes and weights.
    EXPECT_EQ(v4.coded.size(), 2u);
    const std::string again = temp_path("again_" + precision + ".bks");
    save_bundle(again, v3);
    const Bundle w = load_bundle(again);
    ASSERT_EQ(w.coded.size(), 2u);
    for (const auto& [name, t] : v3.coded) {
      const Tensor& u = w.coded.at(name);
      EXPECT_TRUE(t.bytes() == u.bytes() && std::equal(t.data<char>(), t.data<char>() + t.bytes(), u.data<char>()));
    }
    EXPECT_EQ(graph_to_json(w.graph), graph_to_json(v3.graph));
    EXPECT_EQ(w.info, v3.info);
  }
  // A format-4 bundle with a plain tensor of a coded one's name is corrupt, not half read.
  const Bundle v4 = load_bundle(dir + "ip_coded_fp32.bks");
  PackedParts parts;
  parts.strings["graph"] = graph_to_json(v4.graph);
  for (const auto& [name, t] : v4.coded)
    parts.blobs.push_back({name, v4.weights.at(name).shape(), std::string(t.data<char>(), t.bytes())});
  const std::string packed_bytes = pack_parts(parts);
  Tensor packed({static_cast<int64_t>(packed_bytes.size())}, DType::u8);
  std::copy(packed_bytes.begin(), packed_bytes.end(), packed.data<char>());
  const std::string both = temp_path("coded_and_plain.bks");
  save_safetensors(both, {{"bakusoku_packed", &packed}, {"ip.0", &v4.weights.at("ip.0")}},
                   {{"bakusoku_bundle_version", "4"}});
  const std::string error = input_error_of([&] { load_bundle(both); });
  EXPECT_NE(error.find(both + ": tensor 'ip.0': corrupt bundle: stored both coded and plain"), std::string::npos)
      << error;
}

// KL(softmax(t / T) || softmax(s / T)) * T^2 over the rows of an N x C array.
double distillation_reference(const float* s, const float* t, int64_t n, int64_t c, float temp) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto log_softmax = [&](const float* z) {
      std::vector<double> l(static_cast<size_t>(c));
      double top = -1e300, sum = 0;
      for (int64_t k = 0; k < c; ++k) top = std::max(top, double{z[i * c + k]} / temp);
      for (int64_t k = 0; k < c; ++k) sum += std::exp(z[i * c + k] / temp - top);
      for (int64_t k = 0; k < c; ++k) l[static_cast<size_t>(k)] = z[i * c + k] / temp - top - std::log(sum);
      return l;
    };
    const std::vector<double> ls = log_softmax(s), lt = log_softmax(t);
    for (int64_t k = 0; k < c; ++k) total += std::exp(lt[k]) * (lt[k] - ls[k]);
  }
  return total * temp * temp / static_cast<double>(n);
}

TEST(DistillationLoss, ForwardIsTheScaledKlDivergenceAndBackwardItsGradient) {
  for (float temp : {1.f, 4.f}) {
    OpHarness h(fmt::format("type: 'DistillationLoss' distillation_param {{ temperature: {} }}", temp),
                {{6, 5}, {6, 5}});
    h.randomize_inputs(-3.f, 3.f);
    h.forward();
    const double want = distillation_reference(h.in[0].f32(), h.in[1].f32(), 6, 5, temp);
    EXPECT_GT(want, 0.01);
    EXPECT_NEAR(h.out[0].f32()[0], want, 1e-5 * want) << "T " << temp;
    h.check_gradients(1e-3f, 1e-2f, {0});  // the student's scores; the teacher's take none
    // The same scores teach nothing.
    std::copy(h.in[0].f32(), h.in[0].f32() + 30, h.in[1].f32());
    h.forward();
    EXPECT_NEAR(h.out[0].f32()[0], 0.f, 1e-6);
  }
  // Scores per position (N x C x H x W) compare along the channels, averaged over positions.
  OpHarness h("type: 'DistillationLoss'", {{2, 3, 2, 2}, {2, 3, 2, 2}});
  h.randomize_inputs(-2.f, 2.f);
  h.forward();
  double want = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t p = 0; p < 4; ++p) {
      float s[3], t[3];
      for (int64_t k = 0; k < 3; ++k) {
        s[k] = h.in[0].f32()[n * 12 + k * 4 + p];
        t[k] = h.in[1].f32()[n * 12 + k * 4 + p];
      }
      want += distillation_reference(s, t, 1, 3, 4.f) / 8;
    }
  EXPECT_NEAR(h.out[0].f32()[0], want, 1e-5 * want);
  h.check_gradients(1e-3f, 1e-2f, {0});
}

TEST(DistillationLoss, BadInputsNameTheProblem) {
  auto error = [](const std::string& layer, std::vector<Shape> shapes) {
    try {
      OpHarness h(layer, shapes);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("type: 'DistillationLoss'", {{4, 10}, {4, 12}}).find("the teacher's scores (bottom 1) have shape"),
            std::string::npos);
  EXPECT_NE(error("type: 'DistillationLoss' distillation_param { temperature: 0 }", {{4, 10}, {4, 10}})
                .find("distillation_param.temperature must be in (0, 10000]"),
            std::string::npos);
}

constexpr const char* kClassifierNet = R"(
name: "classifier"
layer { name: "in" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 1 dim: 6 dim: 6 } shape { dim: 4 } } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
)";

Graph classifier_graph(const std::string& text) {
  const std::string path = temp_path("classifier.prototxt");
  std::ofstream(path) << text;
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  return build_caffe_graph(load_net_file(path), st);
}

// The classification loss keeps 1 - alpha of its weight; the teacher's scores come in as an
// Input the DistillationLoss reads beside the student's.
TEST(InsertDistillation, PairsTheClassificationLossWithTheTeachersScores) {
  Graph g = classifier_graph(kClassifierNet);
  const PassReport r = insert_distillation(g, 3.f, 0.75f);
  ASSERT_EQ(r.changes.size(), 1u);
  const Node* loss = g.find_node("loss");
  const Node* distill = g.find_node("distillation");
  ASSERT_TRUE(loss && distill);
  EXPECT_FLOAT_EQ(loss->loss_weight.at(0), 0.25f);
  EXPECT_FLOAT_EQ(distill->loss_weight.at(0), 0.75f);
  EXPECT_EQ(g.values[distill->inputs.at(0)].name, "fc");
  EXPECT_EQ(g.values[distill->inputs.at(1)].name, kTeacherScores);

  // Built and run: the loss is 1/4 of the labels' plus 3/4 of the soft targets'.
  CpuBackend be(1);
  ParamStore store;
  NetOptions keep;
  keep.reuse_buffers = false;  // fc is read back below
  Net net(std::move(g), proto::TRAIN, store, be, 1, keep);
  Rng rng(3);
  for (const char* v : {"data", kTeacherScores}) {
    Tensor& t = net.value(v);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(-1.f, 1.f);
  }
  for (int64_t i = 0; i < 4; ++i) net.value("label").f32()[i] = static_cast<float>(i);
  const float total = net.forward();
  const float labels = net.value("loss").f32()[0], soft = net.value("distillation_loss").f32()[0];
  EXPECT_GT(soft, 0.f);
  EXPECT_NEAR(total, 0.25f * labels + 0.75f * soft, 1e-5f);
  const double want = distillation_reference(net.value("fc").f32(), net.value(kTeacherScores).f32(), 4, 5, 3.f);
  EXPECT_NEAR(soft, want, 1e-5 * want);
  net.backward();
  EXPECT_FALSE(net.has_grad(net.graph().find_value(kTeacherScores))) << "the teacher's scores are given";

  Graph none = classifier_graph(R"(
layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "l2" type: "EuclideanLoss" bottom: "x" bottom: "y" top: "l2" }
)");
  try {
    insert_distillation(none, 4.f, 0.5f);
    ADD_FAILURE() << "no classification loss";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("distillation needs a softmax classification loss"), std::string::npos)
        << e.what();
  }
  Graph again = classifier_graph(kClassifierNet);
  EXPECT_THROW(insert_distillation(again, 4.f, 1.5f), InputError);
}

// A small MLP student for Fashion-MNIST with `classes` outputs.
std::string write_mlp_student(const std::string& path, int classes) {
  std::ifstream lenet(kLenet);
  std::string text((std::istreambuf_iterator<char>(lenet)), {});
  // LeNet's two data layers, then an MLP.
  text = text.substr(0, text.find("layer {\n  name: \"conv1\""));
  text += fmt::format(R"(
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param {{ num_output: 32 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param {{ num_output: {} weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy" include {{ phase: TEST }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
)",
                      classes);
  std::ofstream(path) << text;
  return path;
}

// With alpha 1 the student never sees a label: what it scores, it learnt from the teacher.
TEST(KnowledgeDistillation, AStudentLearnsFashionMnistFromTheTeacherAlone) {
  const std::string teacher_run = temp_path("kd_teacher"), student_run = temp_path("kd_student");
  fs::remove_all(teacher_run);
  fs::remove_all(student_run);
  const std::string teacher_solver = temp_path("kd_teacher_solver.prototxt");
  write_lenet_solver(teacher_solver, 400, 0);
  CmdResult t = run_cmd("train --solver " + teacher_solver + " --out " + teacher_run);
  ASSERT_EQ(t.code, 0) << t.output;
  const std::string teacher_weights = teacher_run + "/snapshots/iter_400.safetensors";

  const std::string student = write_mlp_student(temp_path("kd_student.prototxt"), 10);
  const std::string solver = temp_path("kd_student_solver.prototxt");
  std::ofstream(solver) << "net: \"" << student << "\"\nbase_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" "
                        << "max_iter: 300 random_seed: 1\ntest_iter: 100 test_interval: 300 display: 0\n";
  const std::string distill = " --teacher " + kLenet + " --teacher-weights " + teacher_weights;
  CmdResult s = run_cmd("train --solver " + solver + distill + " --alpha 1 --temperature 2 --out " + student_run);
  ASSERT_EQ(s.code, 0) << s.output;
  // The weights the graph got, not the options echoed: the teacher's loss 1, the labels' 0.
  EXPECT_NE(s.output.find("Distillation: 'ip2' (64,10) learns from 'teacher_scores' at temperature 2 (weight 1; "
                          "SoftmaxWithLoss 'loss' weight 0)"),
            std::string::npos)
      << s.output;
  EXPECT_GE(final_accuracy(s.output), 0.70) << s.output;
  std::ifstream run_json(student_run + "/run.json");
  const nlohmann::json run = nlohmann::json::parse(run_json);
  EXPECT_EQ(run["distill"]["alpha"], 1.0) << run.dump();
  EXPECT_EQ(run["distill"]["teacher"], kLenet) << run.dump();

  // A teacher scoring other classes than the student, options that do not go together: one
  // line each, exit 2.
  const std::string twelve = write_mlp_student(temp_path("kd_student12.prototxt"), 12);
  std::ofstream(solver) << "net: \"" << twelve << "\"\nbase_lr: 0.01 lr_policy: \"fixed\" max_iter: 1\n";
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {distill, "it scores (64,10) per batch, but the student's classification loss reads scores (64,12)"},
           {" --teacher " + kLenet, "give its trained weights with --teacher-weights"},
           {" --teacher-weights " + teacher_weights, "--teacher-weights goes with --teacher NET"},
           {distill + " --alpha 1.5", "--alpha must be in [0, 1], got 1.5"},
           {distill + " --temperature -1", "--temperature must be in (0, 10000], got -1"}}) {
    fs::remove_all(student_run);
    CmdResult bad = run_cmd("train --solver " + solver + flags + " --out " + student_run);
    EXPECT_EQ(bad.code, 2) << flags << "\n" << bad.output;
    EXPECT_NE(bad.output.find(says), std::string::npos) << flags << "\n" << bad.output;
  }
}

// U S V^T rebuilds the matrix; the values come sorted, and a known spectrum comes back.
TEST(LowRank, SingularValueDecompositionRebuildsTheMatrix) {
  const int64_t m = 7, n = 4;
  Rng rng(5);
  std::vector<float> a(m * n);
  for (float& x : a) x = rng.uniform(-1.f, 1.f);
  std::vector<float> u, vt;
  const std::vector<float> s = singular_values(a.data(), m, n, &u, &vt);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_TRUE(std::is_sorted(s.rbegin(), s.rend()));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double x = 0;
      for (int64_t k = 0; k < n; ++k) x += double{u[i * n + k]} * s[k] * vt[k * n + j];
      EXPECT_NEAR(x, a[i * n + j], 1e-5) << i << "," << j;
    }
  // diag(3, 2) with rows swapped: singular values 3 and 2.
  const float swapped[] = {0, 2, 3, 0};
  EXPECT_EQ(singular_values(swapped, 2, 2), (std::vector<float>{3.f, 2.f}));
}

// At full rank the factorised LeNet scores exactly as the original; a lower rank keeps fewer
// weights; bad ranks, energies and layer names are one line and exit code 2.
TEST(LowRank, FactorisedLeNetMatchesTheOriginalAtFullRank) {
  const std::string run = temp_path("lr_run"), solver = temp_path("lr_solver.prototxt");
  fs::remove_all(run);
  write_lenet_solver(solver, 50, 0);
  ASSERT_EQ(run_cmd("train --solver " + solver + " --out " + run).code, 0);
  const std::string weights = run + "/snapshots/iter_50.safetensors";
  auto loss_of = [](const std::string& model, const std::string& w) {
    CmdResult t = run_cmd("test --model " + model + " --weights " + w + " --iterations 5");
    EXPECT_EQ(t.code, 0) << t.output;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(t.output, m, std::regex("loss = ([0-9.]+)"))) << t.output;
    return m.size() > 1 ? std::stod(m[1]) : -1.0;
  };
  const double original = loss_of(kLenet, weights);

  const std::string full = temp_path("lr_full");
  fs::remove_all(full);
  CmdResult f =
      run_cmd("factorize --model " + kLenet + " --weights " + weights + " --layers ip1 --rank 500 -o " + full);
  ASSERT_EQ(f.code, 0) << f.output;
  EXPECT_NE(f.output.find("ip1                   500x800    500"), std::string::npos) << f.output;
  const TensorFile w = load_safetensors(full + "/weights.safetensors");
  ASSERT_NE(w.find("ip1/low_rank.0"), nullptr);
  EXPECT_EQ(w.find("ip1/low_rank.0")->shape(), (Shape{500, 800}));
  EXPECT_EQ(w.find("ip1.0")->shape(), (Shape{500, 500}));
  EXPECT_EQ(w.find("ip1.1")->shape(), (Shape{500}));
  EXPECT_NEAR(loss_of(full + "/net.prototxt", full + "/weights.safetensors"), original, 1e-4 * original);
  // conv2 (50 filters of 20x5x5) at full rank: 50 filters, then a 1x1 convolution.
  const std::string conv = temp_path("lr_conv");
  fs::remove_all(conv);
  CmdResult c =
      run_cmd("factorize --model " + kLenet + " --weights " + weights + " --layers conv2 --rank 50 -o " + conv);
  ASSERT_EQ(c.code, 0) << c.output;
  const TensorFile cw = load_safetensors(conv + "/weights.safetensors");
  EXPECT_EQ(cw.find("conv2/low_rank.0")->shape(), (Shape{50, 20, 5, 5}));
  EXPECT_EQ(cw.find("conv2.0")->shape(), (Shape{50, 50, 1, 1}));
  EXPECT_NEAR(loss_of(conv + "/net.prototxt", conv + "/weights.safetensors"), original, 1e-4 * original);

  // Rank 16: 16 x (500 + 800) weights instead of 400,000, and it still trains.
  const std::string low = temp_path("lr_16");
  fs::remove_all(low);
  CmdResult l = run_cmd("factorize --model " + kLenet + " --weights " + weights + " --layers ip1 --rank 16 -o " + low);
  ASSERT_EQ(l.code, 0) << l.output;
  EXPECT_NE(l.output.find("400000        20800"), std::string::npos) << l.output;
  EXPECT_EQ(load_safetensors(low + "/weights.safetensors").find("ip1.0")->shape(), (Shape{500, 16}));
  const std::string ft = temp_path("lr_ft"), ft_solver = temp_path("lr_ft_solver.prototxt");
  fs::remove_all(ft);
  std::ofstream(ft_solver) << "net: \"" << low << "/net.prototxt\"\nbase_lr: 0.01 momentum: 0.9 lr_policy: \"fixed\" "
                           << "max_iter: 100 random_seed: 1\ntest_iter: 100 test_interval: 100 display: 0\n";
  CmdResult t = run_cmd("train --solver " + ft_solver + " --weights " + low + "/weights.safetensors --out " + ft);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_GE(final_accuracy(t.output), 0.7) << t.output;

  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--layers ip1 --rank 501",
            "--rank 501: " + kLenet + ": layer 'ip1' is 500x800, so its rank is at most 500"},
           {"--energy 0", "--energy must be in (0, 1], got 0"},
           {"--layers pool1",
            "--layers pool1: " + kLenet + " has no InnerProduct or Convolution layer of that name"}}) {
    CmdResult bad = run_cmd("factorize --model " + kLenet + " --weights " + weights + " " + flags + " -o " + low);
    EXPECT_EQ(bad.code, 2) << flags << "\n" << bad.output;
    EXPECT_NE(bad.output.find(says), std::string::npos) << flags << "\n" << bad.output;
  }
}

}  // namespace
}  // namespace bks::test
