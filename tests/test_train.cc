// Training end to end on the real Fashion-MNIST data: exact resume, divergence handling and
// the accuracy LeNet must reach.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/file_io.h"
#include "core/log.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "formats/safetensors.h"
#include "train/trainer.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

std::string solver_file(const std::string& name, const std::string& extra) {
  fs::path p = fs::temp_directory_path() / ("bks_train_" + name + ".prototxt");
  std::ofstream(p) << "net: '" << kLenet << "'\n"
                   << "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 power: 0.75\n"
                   << "random_seed: 7\n"
                   << extra;
  return p.string();
}

TrainResult run(const std::string& solver, const std::string& out, const std::string& snapshot = "") {
  TrainOptions o;
  o.solver = solver;
  o.out_dir = (fs::temp_directory_path() / out).string();
  o.snapshot = snapshot;
  o.threads = 2;
  o.progress = false;
  if (snapshot.empty()) fs::remove_all(o.out_dir);
  return train(o);
}

TEST(Train, ResumeIsBitwiseExact) {
  auto straight =
      run(solver_file("straight", "max_iter: 200 snapshot: 100 test_iter: 2 test_interval: 100\n"), "bks_straight");
  auto first = run(solver_file("first", "max_iter: 100 test_iter: 2 test_interval: 100\n"), "bks_resume");
  ASSERT_FALSE(first.last_snapshot.empty());
  auto second =
      run(solver_file("second", "max_iter: 200 test_iter: 2 test_interval: 100\n"), "bks_resume", first.last_snapshot);
  EXPECT_EQ(second.iterations, 200);
  TensorFile a = load_safetensors(fs::path(straight.run_dir) / "snapshots/iter_200.safetensors");
  TensorFile b = load_safetensors(fs::path(second.run_dir) / "snapshots/iter_200.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0)
        << a.tensors[i].first << " differs after resume";
  }
  EXPECT_EQ(straight.last_test, second.last_test);
}

// A fine-tune as Caffe users write it: the solver's `weights` entry (it used to be ignored,
// training from random values), replaced by --weights when that is given.
TEST(Train, SolverWeightsInitialiseTheNet) {
  auto source = run(solver_file("weights_source", "max_iter: 20\n"), "bks_weights_source");
  ASSERT_FALSE(source.last_snapshot.empty());
  const std::string given = (fs::path(source.run_dir) / "snapshots/iter_20.safetensors").string();
  auto same_weights = [&](const std::string& file) {
    TensorFile a = load_safetensors(given), b = load_safetensors(file);
    if (a.tensors.size() != b.tensors.size()) return false;
    for (size_t i = 0; i < a.tensors.size(); ++i)
      if (a.tensors[i].first != b.tensors[i].first ||
          std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()) != 0)
        return false;
    return true;
  };
  // max_iter 0: the snapshot at the end holds the weights the run started from.
  auto tuned = run(solver_file("weights_entry", "max_iter: 0\nweights: '" + given + "'\n"), "bks_weights_entry");
  EXPECT_TRUE(same_weights((fs::path(tuned.run_dir) / "snapshots/iter_0.safetensors").string()));
  auto fresh = run(solver_file("weights_none", "max_iter: 0\n"), "bks_weights_none");
  EXPECT_FALSE(same_weights((fs::path(fresh.run_dir) / "snapshots/iter_0.safetensors").string()));
  TrainOptions o;
  o.solver = solver_file("weights_overridden", "max_iter: 0\nweights: '/nonexistent/w.caffemodel'\n");
  o.out_dir = (fs::temp_directory_path() / "bks_weights_overridden").string();
  o.weights = given;
  o.threads = 2;
  o.progress = false;
  fs::remove_all(o.out_dir);
  auto overridden = train(o);
  EXPECT_TRUE(same_weights((fs::path(overridden.run_dir) / "snapshots/iter_0.safetensors").string()));
}

TEST(Train, NaNLossStopsAndKeepsLastSnapshot) {
  std::string s = solver_file("nan", "max_iter: 400 snapshot: 10\n");
  // A learning rate that grows 1.3x per iteration: sane for the first snapshots, then the
  // loss diverges (with a diverging rate from the start, no snapshot came before the NaN).
  std::string text = read_file(s, "solver");
  const std::string policy = "lr_policy: 'inv' gamma: 0.0001 power: 0.75";
  text.replace(text.find(policy), policy.size(), "lr_policy: 'exp' gamma: 1.3");
  std::ofstream(s) << text;
  std::string dir = (fs::temp_directory_path() / "bks_nan").string();
  fs::remove_all(dir);
  TrainOptions o;
  o.solver = s;
  o.out_dir = dir;
  o.threads = 2;
  o.progress = false;
  int64_t diverged_at = -1;
  std::string message;
  try {
    train(o);
    FAIL() << "training with a learning rate growing 1.3x per iteration should diverge";
  } catch (const RuntimeError& e) {
    message = e.what();
    const size_t at = message.find("at iteration ");
    ASSERT_NE(at, std::string::npos) << message;
    diverged_at = std::stoll(message.substr(at + 13));
  }
  // Snapshots came before the divergence; each is complete, loadable and finite.
  int64_t newest = -1;
  for (auto& e : fs::directory_iterator(fs::path(dir) / "snapshots")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << e.path();
    if (e.path().extension() != ".safetensors") continue;
    TensorFile w = load_safetensors(e.path().string());
    for (auto& [key, t] : w.tensors)
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.f32()[i])) << name << " " << key;
    newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));  // iter_<N>.safetensors
  }
  EXPECT_GE(newest, 10) << "no snapshot before the divergence: the test checks nothing";
  EXPECT_LT(newest, diverged_at);
  EXPECT_NE(message.find("the last good snapshot is " +
                         (fs::path(dir) / "snapshots" / fmt::format("iter_{}.solverstate", newest)).string()),
            std::string::npos)
      << message;
}

// The solver's debug_info: Caffe's per-blob lines on display iterations (0 and 2 of 3) for
// the train net, and on every pass for the test net; no warning that it is ignored.
TEST(Train, DebugInfoPrintsStatisticsOnDisplayIterations) {
  auto r = run(solver_file("debug_info", "max_iter: 3 display: 2 debug_info: true test_iter: 1 test_interval: 100\n"),
               "bks_debug_info");
  std::string log = read_file((fs::path(r.run_dir) / "log.txt").string(), "log");
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(log.find("[warning]"), std::string::npos) << log;
  // LeNet's TRAIN net: 2 display iterations; the final test pass runs the TEST net once.
  EXPECT_EQ(count("[Backward] Layer conv1, param blob 0 diff: "), 2) << log;
  EXPECT_EQ(count("[Update] Layer conv1, param 0 data: "), 2) << log;
  EXPECT_EQ(count("[Backward] All net params (data, diff): L1 norm = ("), 2) << log;
  EXPECT_EQ(count("[Forward] Layer conv1, top blob conv1 data: "), 3) << log;
  EXPECT_EQ(count("[Forward] Layer ip2, param blob 1 data: "), 3) << log;
}

TEST(Train, LenetReachesAccuracyOnFashionMnist) {
  auto r = run(solver_file("e2e", "max_iter: 1000 test_iter: 100 test_interval: 1000 snapshot_after_train: false\n"),
               "bks_e2e");
  ASSERT_TRUE(r.last_test.count("accuracy"));
  EXPECT_GE(r.last_test["accuracy"], 0.84) << "LeNet after 1000 iterations";
  // The run directory follows the contract.
  for (const char* f : {"net.prototxt", "solver.prototxt", "run.json", "metrics.jsonl", "log.txt"})
    EXPECT_TRUE(fs::exists(fs::path(r.run_dir) / f)) << f;
  std::ifstream m(fs::path(r.run_dir) / "metrics.jsonl");
  std::string line;
  int train_lines = 0, test_lines = 0;
  while (std::getline(m, line)) {
    train_lines += line.find("\"phase\":\"train\"") != std::string::npos;
    test_lines += line.find("\"phase\":\"test\"") != std::string::npos;
  }
  EXPECT_GE(train_lines, 1);
  EXPECT_EQ(test_lines, 2) << "at iteration 0 and 1000";
}

// Caffe's Filter in a real training run: LeNet's features and labels go on only for the
// items whose label is above 4 (a Threshold on the label is the selector), so the train and
// test nets run their classifier on a batch that changes every step. Telling 5 classes
// apart, it reaches an accuracy that the 10-class LeNet does not reach in as many steps.
TEST(Train, FilterTrainsOnTheItemsItSelects) {
  std::string net = fs::temp_directory_path() / "bks_train_filter_net.prototxt";
  std::ofstream(net) << R"(name: "LeNetUpperClasses"
layer { name: "fashion" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        transform_param { scale: 0.00390625 }
        data_param { source: "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz" batch_size: 64 } }
layer { name: "fashion" type: "Data" top: "data" top: "label" include { phase: TEST }
        transform_param { scale: 0.00390625 }
        data_param { source: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz" batch_size: 100 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "upper" type: "Threshold" bottom: "label" top: "selector" threshold_param { threshold: 4.5 } }
layer { name: "filter" type: "Filter" bottom: "pool2" bottom: "label" bottom: "selector" top: "fpool2" top: "flabel" }
layer { name: "ip1" type: "InnerProduct" bottom: "fpool2" top: "ip1"
        inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "flabel" top: "accuracy" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "flabel" top: "loss" }
)";
  std::string solver = fs::temp_directory_path() / "bks_train_filter_solver.prototxt";
  std::ofstream(solver) << "net: '" << net << "'\n"
                        << "base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001\n"
                        << "power: 0.75 random_seed: 7 max_iter: 600 test_iter: 50 test_interval: 600\n"
                        << "snapshot_after_train: false\n";
  auto r = run(solver, "bks_filter");
  ASSERT_TRUE(r.last_test.count("accuracy"));
  EXPECT_GE(r.last_test["accuracy"], 0.9) << "LeNet on Fashion-MNIST's classes 5-9 after 600 iterations";
}

// Sequences through HDF5Data, as Caffe's recurrent examples feed them: rows are timesteps of
// 8 streams, a batch of 4 rows is (T 4, N 8), and the streams run on from batch to batch. The
// label at t is the symbol at t - 1, so the first timestep of every batch needs the state the
// LSTM carried over from the last batch: without it, a quarter of the answers are guesses
// (about 0.8 at best).
TEST(Train, LstmLearnsAcrossBatchesFromHdf5Sequences) {
  const fs::path dir = fs::temp_directory_path() / "bks_train_lstm";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(11);
  auto write = [&](const std::string& name, int64_t rows) {
    const int64_t n = 8;
    std::vector<float> x(static_cast<size_t>(rows * n)), cont(x.size(), 1.f), label(x.size(), 0.f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng() % 5);
    for (int64_t i = 0; i < n; ++i) cont[static_cast<size_t>(i)] = 0.f;  // every stream starts at row 0
    for (size_t i = static_cast<size_t>(n); i < x.size(); ++i) label[i] = x[i - static_cast<size_t>(n)];
    auto field = [&](const char* f, const std::vector<float>& v) {
      const auto* b = reinterpret_cast<const uint8_t*>(v.data());
      return DatasetField{f, {n}, DType::f32, std::vector<uint8_t>(b, b + v.size() * sizeof(float))};
    };
    write_hdf5((dir / (name + ".h5")).string(), {field("x", x), field("cont", cont), field("label", label)}, rows);
    std::ofstream(dir / (name + ".txt")) << (dir / (name + ".h5")).string() << "\n";
  };
  write("train", 4000);
  write("test", 400);
  const std::string net = (dir / "net.prototxt").string();
  std::ofstream(net)
      << "name: 'Echo'\n"
      << "layer { name: 'data' type: 'HDF5Data' top: 'x' top: 'cont' top: 'label' include { phase: TRAIN }"
      << " hdf5_data_param { source: '" << (dir / "train.txt").string() << "' batch_size: 4 } }\n"
      << "layer { name: 'data' type: 'HDF5Data' top: 'x' top: 'cont' top: 'label' include { phase: TEST }"
      << " hdf5_data_param { source: '" << (dir / "test.txt").string() << "' batch_size: 4 } }\n"
      << R"(
layer { name: "embed" type: "Embed" bottom: "x" top: "e"
  embed_param { num_output: 8 input_dim: 5 weight_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "lstm" type: "LSTM" bottom: "e" bottom: "cont" top: "h"
  recurrent_param { num_output: 16 weight_filler { type: "uniform" min: -0.2 max: 0.2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
  inner_product_param { num_output: 5 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" softmax_param { axis: 2 } }
layer { name: "accuracy" type: "Accuracy" bottom: "y" bottom: "label" top: "accuracy"
  accuracy_param { axis: 2 } include { phase: TEST } }
)";
  const std::string solver = (dir / "solver.prototxt").string();
  std::ofstream(solver)
      << "net: '" << net << "'\n"
      << "type: 'Adam' base_lr: 0.01 momentum: 0.9 momentum2: 0.999 lr_policy: 'fixed'\n"
      << "random_seed: 3 max_iter: 800 test_iter: 100 test_interval: 800 snapshot_after_train: false\n";
  auto r = run(solver, "bks_lstm_run");
  ASSERT_TRUE(r.last_test.count("accuracy"));
  EXPECT_GE(r.last_test["accuracy"], 0.95) << "an LSTM echoing the last symbol, across batch boundaries too";
}

// A fresh temporary directory `name` whose text.txt is kSentence 200 times.
constexpr const char* kSentence = "the quick brown fox jumps over the lazy dog. ";  // 28 distinct characters
fs::path sentence_text(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream text(dir / "text.txt");
  for (int i = 0; i < 200; ++i) text << kSentence;
  return dir;
}

// The TRAIN and TEST TextData layers over `dir`/text.txt (tops c, cont, next): 8 streams of
// 25 characters, the last 10% held out for TEST.
std::string sentence_data_layers(const fs::path& dir) {
  const std::string data = "text_data_param { source: '" + (dir / "text.txt").string() +
                           "' batch_size: 8 seq_len: 25 holdout: 0.1 vocabulary_size: 28";
  return "layer { name: 'text' type: 'TextData' top: 'c' top: 'cont' top: 'next' include { phase: TRAIN } " + data +
         " } }\n" + "layer { name: 'text' type: 'TextData' top: 'c' top: 'cont' top: 'next' include { phase: TEST } " +
         data + " read_holdout: true } }\n";
}

// A char-RNN (TextData -> Embed -> LSTM -> InnerProduct) learns a sentence said over and
// over, measured in validation bits per character on the held-out tail; `bakusoku sample`
// then continues a primer with it, the same text for the same seed.
TEST(Train, CharRnnLearnsTextAndSampleContinuesIt) {
  const fs::path dir = sentence_text("bks_char_rnn");
  const std::string sentence = kSentence;
  const std::string net = (dir / "net.prototxt").string();
  std::ofstream(net) << sentence_data_layers(dir) << R"(
layer { name: "embed" type: "Embed" bottom: "c" top: "e"
  embed_param { num_output: 16 input_dim: 28 weight_filler { type: "uniform" min: -0.1 max: 0.1 } } }
layer { name: "lstm" type: "LSTM" bottom: "e" bottom: "cont" top: "h"
  recurrent_param { num_output: 64 weight_filler { type: "uniform" min: -0.1 max: 0.1 } } }
layer { name: "logits" type: "InnerProduct" bottom: "h" top: "logits"
  inner_product_param { num_output: 28 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "logits" bottom: "next" top: "loss" softmax_param { axis: 2 } }
layer { name: "bpc" type: "Power" bottom: "loss" top: "bpc" power_param { scale: 1.4426950408889634 }
  include { phase: TEST stage: "validation" } }
)";
  // 900 held-out characters: 8 streams of 112, 4 batches of 25 in a validation pass.
  const std::string solver = (dir / "solver.prototxt").string();
  std::ofstream(solver) << "net: '" << net << "'\n"
                        << "test_state { stage: 'validation' } test_iter: 4 test_interval: 300\n"
                        << "type: 'Adam' base_lr: 0.01 momentum: 0.9 momentum2: 0.999 lr_policy: 'fixed'\n"
                        << "clip_gradients: 5 random_seed: 5 max_iter: 300\n";
  auto r = run(solver, "bks_char_rnn_run");
  ASSERT_TRUE(r.last_test.count("bpc"));
  EXPECT_LT(r.last_test["bpc"], 0.2) << "from log2(28) = 4.8 bits per character untrained";
  ASSERT_FALSE(r.last_snapshot.empty());

  const std::string weights = fs::path(r.last_snapshot).replace_extension(".safetensors").string();
  const std::string sample = fmt::format("sample --model {} --weights {} ", net, weights);
  auto greedy = test::run_shell(std::string(BKS_BINARY) + " " + sample +
                                "--primer 'the quick' --length 40 --temperature 0 2>/dev/null");
  ASSERT_EQ(greedy.code, 0) << greedy.output;
  EXPECT_EQ(greedy.output, (sentence + sentence).substr(0, 9 + 40) + "\n") << "the primer, then 40 characters";
  // The default runs oneDNN's LSTM primitive; the matmul kernel continues the same way.
  auto stepped = test::run_shell(std::string(BKS_BINARY) + " " + sample +
                                 "--primer 'the quick' --length 40 --temperature 0 --kernel LSTM=oneDNN 2>/dev/null");
  EXPECT_EQ(stepped.code, 0) << stepped.output;
  EXPECT_EQ(stepped.output, greedy.output);
  auto hot = [&](int seed) {
    auto s = test::run_shell(
        fmt::format("{} {} --length 200 --temperature 3 --seed {} 2>/dev/null", BKS_BINARY, sample, seed));
    EXPECT_EQ(s.code, 0) << s.output;
    return s.output;
  };
  const std::string a = hot(1);
  EXPECT_EQ(a.size(), 201u) << "200 characters and a newline";
  EXPECT_EQ(hot(1), a) << "the same seed gives the same text";
  EXPECT_NE(hot(2), a) << "at temperature 3, another seed gives other text";
}

// A one-block causal transformer (learned positions, attention, a GELU feed-forward layer,
// pre-norm residuals) learns the same repeated sentence from windows of 25 characters
// with either attention kernel. Predicting from the current character alone scores 0.92
// bits per character on this text, from the last two 0.04: below 0.3 the model must have
// attended to earlier timesteps. Greedy sampling then continues the sentence.
TEST(Train, CharTransformerLearnsTextWithBothKernels) {
  const fs::path dir = sentence_text("bks_char_transformer");
  const std::string sentence = kSentence;
  for (const char* kernel : {"SOFTMAX", "PERFORMER"}) {
    SCOPED_TRACE(kernel);
    const std::string net = (dir / (std::string(kernel) + ".prototxt")).string();
    std::ofstream(net) << sentence_data_layers(dir) << R"(
layer { name: "no_cont" type: "Silence" bottom: "cont" }
layer { name: "embed" type: "Embed" bottom: "c" top: "e"
  embed_param { num_output: 32 input_dim: 28 bias_term: false weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "pos" type: "PositionalEncoding" bottom: "e" top: "x" positional_encoding_param { max_length: 25 } }
layer { name: "ln1" type: "LayerNorm" bottom: "x" top: "n1" }
layer { name: "att" type: "MultiHeadAttention" bottom: "n1" top: "a"
  attention_param { num_heads: 2 causal: true num_features: 32 kernel: )"
                       << kernel << R"( } }
layer { name: "res1" type: "Eltwise" bottom: "x" bottom: "a" top: "r1" }
layer { name: "ln2" type: "LayerNorm" bottom: "r1" top: "n2" }
layer { name: "ff1" type: "InnerProduct" bottom: "n2" top: "f1"
  inner_product_param { num_output: 64 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "gelu" type: "GELU" bottom: "f1" top: "f1" }
layer { name: "ff2" type: "InnerProduct" bottom: "f1" top: "f2"
  inner_product_param { num_output: 32 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "res2" type: "Eltwise" bottom: "r1" bottom: "f2" top: "r2" }
layer { name: "logits" type: "InnerProduct" bottom: "r2" top: "logits"
  inner_product_param { num_output: 28 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "logits" bottom: "next" top: "loss" softmax_param { axis: 2 } }
layer { name: "bpc" type: "Power" bottom: "loss" top: "bpc" power_param { scale: 1.4426950408889634 }
  include { phase: TEST stage: "validation" } }
)";
    const std::string solver = (dir / (std::string(kernel) + "_solver.prototxt")).string();
    std::ofstream(solver) << "net: '" << net << "'\n"
                          << "test_state { stage: 'validation' } test_iter: 4 test_interval: 400\n"
                          << "type: 'Adam' base_lr: 0.005 momentum: 0.9 momentum2: 0.98 lr_policy: 'fixed'\n"
                          << "clip_gradients: 1 random_seed: 5 max_iter: 400\n";
    auto r = run(solver, std::string("bks_char_transformer_run_") + kernel);
    ASSERT_TRUE(r.last_test.count("bpc"));
    EXPECT_LT(r.last_test["bpc"], 0.3) << "from log2(28) = 4.8 bits per character untrained";
    // sample feeds it the last 25 characters at every step.
    ASSERT_FALSE(r.last_snapshot.empty());
    const std::string weights = fs::path(r.last_snapshot).replace_extension(".safetensors").string();
    auto greedy =
        test::run_shell(fmt::format("{} sample --model {} --weights {} --primer 'the quick' --length 60 "
                                    "--temperature 0 2>/dev/null",
                                    BKS_BINARY, net, weights));
    ASSERT_EQ(greedy.code, 0) << greedy.output;
    EXPECT_EQ(greedy.output, (sentence + sentence).substr(0, 9 + 60) + "\n") << "past the 25-character window";
  }
}

// Fashion-MNIST as PNG files and a list of them, in the IDX file's order.
fs::path write_pngs(const std::string& idx_images, const fs::path& dir) {
  auto ds = read_idx_pair(idx_images, idx_labels_path(idx_images));
  fs::create_directories(dir);
  std::ofstream list(dir / "list.txt");
  for (int64_t i = 0; i < ds->size; ++i) {
    std::string name = fmt::format("{:05d}.png", i);
    std::ofstream(dir / name, std::ios::binary) << encode_image(ds->fields[0].u8(i), 1, 28, 28, false, false);
    list << name << " " << int{ds->fields[1].u8(i)[0]} << "\n";
  }
  return dir / "list.txt";
}

// LeNet trained on LMDBs that `bakusoku convert_imageset` made from PNG files reaches the same
// accuracy as on the IDX files the PNGs came from: the same pixels in the same order, so
// the same batches, to the last bit.
TEST(Train, LenetOnConvertedLmdbMatchesIdx) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  fs::path root = fs::temp_directory_path() / "bks_train_lmdb";
  fs::remove_all(root);
  for (const char* split : {"train", "t10k"}) {
    fs::path list = write_pngs(dir + split + "-images-idx3-ubyte.gz", root / split);
    auto r = test::run_cmd(fmt::format("convert_imageset --gray {}/ {} {}", (root / split).string(), list.string(),
                                       (root / (std::string(split) + "_lmdb")).string()));
    ASSERT_EQ(r.code, 0) << r.output;
    fs::remove_all(root / split);  // the images are in the database now
  }
  std::string net = read_file(kLenet, "net");
  for (const char* split : {"train", "t10k"}) {
    std::string from = dir + split + "-images-idx3-ubyte.gz";
    net.replace(net.find(from), from.size(), (root / (std::string(split) + "_lmdb")).string());
  }
  auto at = net.find("batch_size");
  net.insert(at, "backend: LMDB ");
  fs::path lmdb_net = root / "lenet_lmdb.prototxt";
  std::ofstream(lmdb_net) << net;
  const std::string common = "max_iter: 500 test_iter: 100 test_interval: 500 snapshot_after_train: false\n";
  auto idx = run(solver_file("idx", common), "bks_lmdb_vs_idx_idx");
  std::string s = read_file(solver_file("lmdb", common), "solver");
  s.replace(s.find(kLenet), kLenet.size(), lmdb_net.string());
  std::ofstream(root / "solver.prototxt") << s;
  auto lmdb = run((root / "solver.prototxt").string(), "bks_lmdb_vs_idx_lmdb");
  ASSERT_TRUE(idx.last_test.count("accuracy") && lmdb.last_test.count("accuracy"));
  EXPECT_GE(idx.last_test["accuracy"], 0.75);
  EXPECT_EQ(lmdb.last_test["accuracy"], idx.last_test["accuracy"]);
  EXPECT_EQ(lmdb.last_test["loss"], idx.last_test["loss"]);
  fs::remove_all(root);
}

// `bakusoku train ARGS`, output to `log`; its pid.
pid_t spawn_train(const std::vector<std::string>& args, const std::string& log) {
  std::fflush(stdout);  // or the child writes this process's buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (!f || dup2(fileno(stdout), 2) < 0) _exit(127);
    std::vector<char*> argv{const_cast<char*>(BKS_BINARY), const_cast<char*>("train")};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(BKS_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

// The newest snapshot's solver state in `dir`, after checking that every state written is
// whole: it loads, and so do the weights it names.
std::string newest_whole_snapshot(const fs::path& dir) {
  int64_t newest = -1;
  std::string path;
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".solverstate") continue;
    TensorFile state = load_safetensors(e.path().string());  // throws when torn
    EXPECT_TRUE(fs::exists(dir / state.metadata.at("weights"))) << e.path();
    load_safetensors((dir / state.metadata.at("weights")).string());
    int64_t it = std::stoll(state.metadata.at("iter"));
    if (it > newest) newest = it, path = e.path().string();
  }
  return path;
}

// kill -9 at random moments (many land inside a snapshot, written every 2 iterations):
// the newest snapshot always resumes, no file is ever torn, and the last run leaves no
// temporary behind and a metrics file without repeated iterations.
TEST(Train, KillNineAtRandomPointsAlwaysResumes) {
  const std::string solver =
      solver_file("kill", "max_iter: 100000 snapshot: 2 test_iter: 1 test_interval: 50 display: 5\n");
  const fs::path dir = fs::temp_directory_path() / "bks_kill";
  const std::string log = (fs::temp_directory_path() / "bks_kill.log").string();
  fs::remove_all(dir);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(300, 2500);
  std::string newest;
  int rounds_with_snapshot = 0, mid_write = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<std::string> args{"--solver", solver, "--out", dir.string(), "--threads", "1", "--keep-snapshots", "3"};
    if (!newest.empty())
      args.insert(args.end(), {"--snapshot", newest});
    else
      fs::remove_all(dir);  // killed before its first snapshot: start afresh
    pid_t pid = spawn_train(args, log);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    int status = 0;
    // Still running means it resumed: a snapshot it could not read ends it with exit 2.
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "seed " << seed << ", round " << round << ": ended early:\n"
                                                 << read_file(log, "log");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    if (!fs::exists(dir / "snapshots")) continue;
    for (auto& e : fs::directory_iterator(dir / "snapshots"))
      mid_write += e.path().filename().string().find(".tmp-") != std::string::npos;
    ASSERT_NO_THROW(newest = newest_whole_snapshot(dir / "snapshots")) << "seed " << seed << ", round " << round;
    rounds_with_snapshot += !newest.empty();
  }
  ASSERT_GE(rounds_with_snapshot, 8) << "too few rounds got as far as a snapshot";
  std::printf("kill -9 x12 (seed %u): %d landed while a snapshot file was being written\n", seed, mid_write);
  // The last run ends by itself, 10 iterations after the newest snapshot.
  TensorFile state = load_safetensors(newest);
  const int64_t from = std::stoll(state.metadata.at("iter"));
  const std::string final_solver = solver_file(
      "kill_final", fmt::format("max_iter: {} snapshot: 2 test_iter: 1 test_interval: 50 display: 5\n", from + 10));
  pid_t pid =
      spawn_train({"--solver", final_solver, "--out", dir.string(), "--threads", "1", "--snapshot", newest}, log);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(log, "log");
  for (const fs::path& d : {dir, dir / "snapshots"})
    for (auto& e : fs::directory_iterator(d))
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path() << " was left behind";
  // Every line whole; train records at increasing iterations (superseded ones dropped at resume).
  std::ifstream m(dir / "metrics.jsonl");
  std::string line;
  int64_t last_train = -1, last_test = -1;
  while (std::getline(m, line)) {
    nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(r.is_discarded()) << "torn line: " << line;
    int64_t& last = r["phase"] == "test" ? last_test : last_train;
    EXPECT_GT(r["iter"].get<int64_t>(), last) << "repeated: " << line;
    last = r["iter"].get<int64_t>();
  }
  EXPECT_EQ(last_train, from + 10);
}

}  // namespace
}  // namespace bks
