// The command line as a user meets it: exit codes and one-line errors naming the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "caffe.pb.h"
#include "cli_util.h"
#include "data/image_decode.h"

namespace bks::test {
namespace {
namespace fs = std::filesystem;

const std::string kLenet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

std::string write_temp(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("bks_cli_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, DeviceQuery) {
  auto r = run_cmd("device_query");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("oneDNN"), std::string::npos);
  EXPECT_NE(r.output.find("GPU"), std::string::npos) << "a line on the GPUs, none or some";
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run_cmd("").code, 2);
  EXPECT_EQ(run_cmd("train").code, 2);
  EXPECT_EQ(run_cmd("frobnicate").code, 2);
}

TEST(Cli, BadPrototxtIsOneLineWithFileAndExitTwo) {
  std::string bad = write_temp("syntax.prototxt", "layer {\n  name: 'x'\n  type: ReLU\n");
  auto r = run_cmd("time --model " + bad);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(bad + ":"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  auto m = run_cmd("time --model /nonexistent/net.prototxt");
  EXPECT_EQ(m.code, 2);
  EXPECT_NE(m.output.find("/nonexistent/net.prototxt"), std::string::npos);
}

TEST(Cli, SemanticErrorsExitTwoWithFileAndLine) {
  std::string unknown =
      write_temp("unknown.prototxt",
                 "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 dim: 2 } } }\n"
                 "layer { name: 'q' type: 'Quantum' bottom: 'x' top: 'y' }\n");
  auto r = run_cmd("time --model " + unknown);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find(unknown + ":2: layer 'q'"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  std::string nodata =
      write_temp("nodata.prototxt",
                 "layer { name: 'd' type: 'Data' top: 'x' top: 'l'\n"
                 "  data_param { source: '/nonexistent/train-images-idx3-ubyte.gz' batch_size: 4 } }\n");
  r = run_cmd("time --model " + nodata);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("/nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << r.output;
  std::string solver =
      write_temp("badsolver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01\nlr_policy: 'wobbly'\nmax_iter: 10\n");
  r = run_cmd("train --solver " + solver + " --out " + (fs::temp_directory_path() / "bks_cli_bad").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("wobbly"), std::string::npos) << r.output;
}

// A GPU that is not there (no CUDA build, no GPU, or not that many) is one clear line.
TEST(Cli, GpuThatIsNotThereExitsTwo) {
  std::string solver =
      write_temp("gpu_solver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 lr_policy: 'fixed' max_iter: 1\n");
  auto r =
      run_cmd("train --solver " + solver + " --gpu 7 --out " + (fs::temp_directory_path() / "bks_cli_gpu").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--gpu 7: "), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

// sample's bad input: one line naming what is wrong, exit 2, before any weights are read.
TEST(Cli, SampleBadInputExitsTwo) {
  const std::string text = write_temp("sample_text.txt", "abcabcabcabc");
  const std::string layers =
      "layer { name: 'e' type: 'Embed' bottom: 'c' top: 'e' embed_param { num_output: 4 input_dim: 3 } }\n"
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'e' top: 'y' inner_product_param { num_output: 3 axis: 2 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'y' bottom: 'n' top: 'loss' softmax_param { axis: 2 } }\n";
  const std::string net =
      write_temp("sample_net.prototxt",
                 "layer { name: 'text' type: 'TextData' top: 'c' top: 'cont' top: 'n' text_data_param { "
                 "source: '" +
                     text + "' batch_size: 1 seq_len: 2 } }\n" + layers);
  auto unknown = run_cmd("sample --model " + net + " --weights /nonexistent.safetensors --primer 'abz'");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--primer character 'z' U+007A (character 2) is not among the 3 characters"),
            std::string::npos)
      << unknown.output;
  auto not_utf8 =
      run_cmd("sample --model " + net + " --weights /nonexistent.safetensors --primer \"$(printf 'a\\377')\"");
  EXPECT_EQ(not_utf8.code, 2) << not_utf8.output;
  EXPECT_NE(not_utf8.output.find("--primer: not UTF-8 text"), std::string::npos) << not_utf8.output;
  const std::string gone =
      write_temp("sample_gone.prototxt",
                 "layer { name: 'text' type: 'TextData' top: 'c' top: 'cont' top: 'n' text_data_param { "
                 "source: '/nonexistent/text.txt' batch_size: 1 } }\n" +
                     layers);
  auto no_text = run_cmd("sample --model " + gone + " --weights /nonexistent.safetensors");
  EXPECT_EQ(no_text.code, 2) << no_text.output;
  EXPECT_NE(no_text.output.find("layer 'text': the characters come from its text_data_param source"), std::string::npos)
      << no_text.output;
  auto no_layer = run_cmd("sample --model " + kLenet + " --weights /nonexistent.safetensors");
  EXPECT_EQ(no_layer.code, 2) << no_layer.output;
  EXPECT_NE(no_layer.output.find("sample needs a TextData layer"), std::string::npos) << no_layer.output;
  auto no_weights = run_cmd("sample --model " + net + " --weights /nonexistent.safetensors");
  EXPECT_EQ(no_weights.code, 2) << no_weights.output;
  EXPECT_NE(no_weights.output.find("/nonexistent.safetensors"), std::string::npos) << no_weights.output;
  EXPECT_EQ(run_cmd("sample --model " + net + " --weights w --temperature -1").code, 2);
  EXPECT_EQ(count_lines(unknown.output), 1) << unknown.output;
}

TEST(Cli, RefusesToTrainIntoAnExistingRun) {
  std::string dir = (fs::temp_directory_path() / "bks_cli_existing").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "metrics.jsonl") << "{}\n";
  std::string solver =
      write_temp("existing_solver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 lr_policy: 'fixed' max_iter: 1\n");
  auto r = run_cmd("train --solver " + solver + " --out " + dir);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("already holds a run"), std::string::npos) << r.output;
  std::ifstream m(fs::path(dir) / "metrics.jsonl");
  std::string line;
  std::getline(m, line);
  EXPECT_EQ(line, "{}") << "the existing run is untouched";
}

TEST(Cli, CorruptWeightsExitTwo) {
  std::string w = write_temp("corrupt.safetensors", std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13));
  auto r = run_cmd("test --model " + kLenet + " --weights " + w + " --iterations 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(w), std::string::npos) << r.output;
}

// A safetensors file `name` of the JSON `header` and `data` zero bytes.
std::string zero_safetensors(const std::string& name, const std::string& header, size_t data) {
  std::string size(8, '\0');
  size[0] = static_cast<char>(header.size());
  size[1] = static_cast<char>(header.size() >> 8);
  return write_temp(name, size + header + std::string(data, '\0'));
}

// Weights that match none of the net's blobs (another net's, a V1 .caffemodel) are refused,
// not trained over from random values with exit 0.
TEST(Cli, WeightsMatchingNoBlobExitTwo) {
  const std::string w =
      zero_safetensors("unrelated.safetensors", R"({"other.0":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  std::string solver =
      write_temp("unrelated_solver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 lr_policy: 'fixed' max_iter: 5\n");
  const std::string out = (fs::temp_directory_path() / "bks_cli_unrelated").string();
  fs::remove_all(out);
  auto r = run_cmd("train --solver " + solver + " --weights " + w + " --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(w + ": none of the net's 8 parameter blobs are in this file (the first is 'conv1.0'"),
            std::string::npos)
      << r.output;
  r = run_cmd("test --model " + kLenet + " --weights " + w + " --iterations 1");
  EXPECT_EQ(r.code, 2) << r.output;
}

// Fine-tuning for another class count: a blob of the wrong shape is refused (naming both
// shapes) unless --reinit-mismatched, which leaves it at its filler and trains.
TEST(Cli, ReinitMismatchedLetsAResizedClassifierTrain) {
  const std::string w = zero_safetensors("five_classes.safetensors",
                                         R"({"conv1.1":{"dtype":"F32","shape":[20],"data_offsets":[0,80]},)"
                                         R"("ip2.0":{"dtype":"F32","shape":[5,500],"data_offsets":[80,10080]}})",
                                         10080);
  std::string solver =
      write_temp("resized_solver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 lr_policy: 'fixed' max_iter: 2\n");
  const std::string out = (fs::temp_directory_path() / "bks_cli_resized").string();
  fs::remove_all(out);
  auto r = run_cmd("train --solver " + solver + " --weights " + w + " --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("tensor 'ip2.0' has shape (5,500) but the net expects (10,500)"), std::string::npos)
      << r.output;
  fs::remove_all(out);
  r = run_cmd("train --solver " + solver + " --weights " + w + " --reinit-mismatched --out " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("'ip2.0' has shape (5,500) but the net expects (10,500): it keeps its initial values"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(fs::path(out) / "metrics.jsonl"));
  EXPECT_EQ(run_cmd("train --solver " + solver + " --reinit-mismatched --out " + out + "2").code, 2)
      << "the flag needs --weights";
}

// --stage and --level choose the layers of include/exclude rules, as in `caffe time`.
TEST(Cli, StageAndLevelSelectLayers) {
  const std::string net =
      write_temp("staged.prototxt",
                 "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 dim: 4 } } }\n"
                 "layer { name: 'staged' type: 'ReLU' bottom: 'x' top: 'y' include { stage: 'extra' } }\n"
                 "layer { name: 'leveled' type: 'TanH' bottom: 'x' top: 'z' include { min_level: 2 } }\n"
                 "layer { name: 'plain' type: 'Sigmoid' bottom: 'x' top: 'w' exclude { stage: 'extra' } }\n");
  auto layers = [&](const std::string& flags) {
    auto r = run_cmd("time --model " + net + " --phase TEST --iterations 1 " + flags);
    EXPECT_EQ(r.code, 0) << r.output;
    std::string found;
    for (const char* name : {"staged", "leveled", "plain"})
      if (r.output.find(std::string("\n") + name + " ") != std::string::npos) found += std::string(name) + " ";
    return found;
  };
  EXPECT_EQ(layers(""), "plain ");
  EXPECT_EQ(layers("--stage extra"), "staged ");
  EXPECT_EQ(layers("--stage extra,other --level 2"), "staged leveled ");
  EXPECT_EQ(layers("--level 3"), "leveled plain ");
  // deploy builds its TEST net in the same state; the weights file has nothing for these layers.
  const std::string header = R"({"other.0":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  const std::string w = write_temp("staged.safetensors", bytes + header + std::string(4, '\0'));
  const std::string out = (fs::temp_directory_path() / "bks_cli_staged.bks").string();
  auto d = run_cmd("deploy --model " + net + " --weights " + w + " -o " + out + " --stage extra --print-graph");
  EXPECT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("staged"), std::string::npos) << d.output;
  EXPECT_EQ(d.output.find("plain"), std::string::npos) << d.output;
  EXPECT_EQ(run_cmd("time --model " + net + " --level -1").code, 2);
}

// --kernel TYPE=NAME runs the named kernel for that type (the kernel column says which ran);
// a malformed, unknown or unsuitable choice is one line and exit 2.
TEST(Cli, KernelOptionRunsTheNamedKernel) {
  const std::string net = write_temp(
      "lstm_kernels.prototxt",
      "layer { name: 'in' type: 'Input' top: 'x' top: 'cont' top: 's' input_param { shape { dim: 3 dim: 2 dim: 4 } "
      "shape { dim: 3 dim: 2 } shape { dim: 2 dim: 5 } } }\n"
      "layer { name: 'rec' type: 'LSTM' bottom: 'x' bottom: 'cont' top: 'h' recurrent_param { num_output: 4 } }\n"
      "layer { name: 'with_static' type: 'LSTM' bottom: 'x' bottom: 'cont' bottom: 's' top: 'h2' "
      "recurrent_param { num_output: 4 } }\n");
  const std::string lstm_only = write_temp(
      "lstm_kernel.prototxt",
      "layer { name: 'in' type: 'Input' top: 'x' top: 'cont' input_param { shape { dim: 3 dim: 2 dim: 4 } "
      "shape { dim: 3 dim: 2 } } }\n"
      "layer { name: 'rec' type: 'LSTM' bottom: 'x' bottom: 'cont' top: 'h' recurrent_param { num_output: 4 } }\n");
  auto kernel_of = [&](const std::string& flags) {
    auto r = run_cmd("time --model " + lstm_only + " --iterations 1 " + flags);
    EXPECT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("\nrec ");
    if (at == std::string::npos) return std::string("(no row)");
    const std::string row = r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1);
    return row.substr(row.rfind("   ") + 3);
  };
  EXPECT_EQ(kernel_of("").rfind("oneDNN LSTM", 0), 0u);  // the primitive is the default
  EXPECT_EQ(kernel_of("--kernel LSTM=oneDNN"), "oneDNN matmul");
  EXPECT_EQ(kernel_of("--kernel LSTM=loops"), "loops");
  for (const auto& [flag, says] : std::vector<std::pair<std::string, std::string>>{
           {"LSTM=nope", "--kernel LSTM=nope: LSTM has no kernel 'nope' (it has: "},
           {"Nope=loops", "--kernel Nope=loops: no layer type 'Nope'"},
           {"LSTM", "--kernel LSTM: give TYPE=NAME"}}) {
    auto r = run_cmd("time --model " + lstm_only + " --iterations 1 --kernel " + flag);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  }
  // oneDNN's LSTM primitive has no static input: by default that layer runs the matmul
  // kernel, and asking for the primitive is an error.
  const auto plain = run_cmd("time --model " + net + " --iterations 1");
  EXPECT_EQ(plain.code, 0) << plain.output;
  EXPECT_NE(plain.output.find("oneDNN matmul"), std::string::npos) << plain.output;
  auto r = run_cmd("time --model " + net + " --iterations 1 --kernel 'LSTM=oneDNN LSTM'");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("layer 'with_static'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--kernel LSTM=oneDNN LSTM: that kernel cannot run this layer"), std::string::npos)
      << r.output;
}

// A train_val file whose data is not on this machine is timed and deployed anyway: its data
// layer stands in as an Input of the shape the file implies (crop_size, the mean's
// channels), or of --input-shape; without either, one line asks for --input-shape.
TEST(Cli, TimeAndDeployATrainValWhoseDataIsAbsent) {
  auto net = [&](const std::string& name, const std::string& transform) {
    return write_temp(name,
                      "layer { name: 'data' type: 'Data' top: 'data' top: 'label' include { phase: TEST }\n"
                      "  transform_param { " +
                          transform +
                          " }\n"
                          "  data_param { source: '/nonexistent/ilsvrc12_val_lmdb' batch_size: 2 backend: LMDB } }\n"
                          "layer { name: 'conv' type: 'Convolution' bottom: 'data' top: 'conv'\n"
                          "  convolution_param { num_output: 4 kernel_size: 3 } }\n"
                          "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'conv' bottom: 'label' top: 'loss'\n"
                          "  include { phase: TRAIN } }\n");
  };
  const std::string cropped =
      net("absent_crop.prototxt", "crop_size: 9 mean_value: 104 mean_value: 117 mean_value: 123");
  auto r = run_cmd("time --model " + cropped + " --phase TEST --iterations 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("data source /nonexistent/ilsvrc12_val_lmdb not found; stands in as Input (2,3,9,9)"),
            std::string::npos)
      << r.output;
  const std::string out = (fs::temp_directory_path() / "bks_cli_absent.bks").string();
  auto d = run_cmd("deploy --model " + cropped + " --random-weights -o " + out + " --input-shape 1,3,16,16");
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("stands in as Input (1,3,16,16)"), std::string::npos) << d.output;
  const std::string bare = net("absent_bare.prototxt", "scale: 0.5");
  auto e = run_cmd("time --model " + bare + " --phase TEST --iterations 1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("layer 'data' (Data): data source /nonexistent/ilsvrc12_val_lmdb not found"),
            std::string::npos)
      << e.output;
  EXPECT_NE(e.output.find("give --input-shape N,C,H,W"), std::string::npos) << e.output;
  EXPECT_EQ(count_lines(e.output), 1) << e.output;
  EXPECT_EQ(run_cmd("time --model " + bare + " --phase TEST --iterations 1 --input-shape 1,1,5,5").code, 0);
  EXPECT_EQ(run_cmd("time --model " + bare + " --phase TEST --input-shape 1,x").code, 2);
  // Training needs the data: no stand-in there.
  const std::string solver = write_temp("absent_solver.prototxt", "net: '" + bare + "'\nbase_lr: 0.1 max_iter: 1\n");
  auto t = run_cmd("train --solver " + solver + " --out " + (fs::temp_directory_path() / "bks_cli_absent").string());
  EXPECT_EQ(t.code, 2) << t.output;
}

// WindowData and DenseImageData stand in by their own shapes: the crop squares, or the dense
// crop with its label map (N, 1, H, W), which --input-shape resizes with the data.
TEST(Cli, TimeWindowAndDenseDataWhoseSourcesAreAbsent) {
  const std::string window = write_temp(
      "absent_window.prototxt",
      "layer { name: 'data' type: 'WindowData' top: 'data' top: 'label'\n"
      "  window_data_param { source: '/nonexistent/windows.txt' batch_size: 4 context_pad: 2 }\n"
      "  transform_param { crop_size: 12 mirror: true } }\n"
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { num_output: 3 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }\n");
  auto r = run_cmd("time --model " + window + " --iterations 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("data source /nonexistent/windows.txt not found; stands in as Input (4,3,12,12)"),
            std::string::npos)
      << r.output;
  const std::string dense = write_temp(
      "absent_dense.prototxt",
      "layer { name: 'data' type: 'DenseImageData' top: 'data' top: 'label'\n"
      "  dense_image_data_param { source: '/nonexistent/pairs.txt' batch_size: 2 crop_height: 6 crop_width: 8 } }\n"
      "layer { name: 'conv' type: 'Convolution' bottom: 'data' top: 'conv'\n"
      "  convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'conv' bottom: 'label' top: 'loss'\n"
      "  loss_param { weight_by_label_freqs: true class_weighting: 1 class_weighting: 2 class_weighting: 3 } }\n");
  r = run_cmd("time --model " + dense + " --iterations 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stands in as Input (2,3,6,8)"), std::string::npos) << r.output;
  r = run_cmd("time --model " + dense + " --iterations 1 --input-shape 1,3,10,12");
  EXPECT_EQ(r.code, 0) << "the label map follows the given shape: " << r.output;
}

// A solver state whose metadata is not a number: one line naming the file and key, exit 2
// (it was std::stoull's "stoull", exit 1).
TEST(Cli, CorruptSolverStateMetadataExitsTwo) {
  std::string header = R"({"__metadata__":{"iter":"3","weights":"w.safetensors","seed":"x"}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  std::string state = write_temp("badmeta.solverstate", bytes + header);
  std::string solver =
      write_temp("badmeta_solver.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 lr_policy: 'fixed' max_iter: 5\n");
  auto r = run_cmd("train --solver " + solver + " --snapshot " + state + " --out " +
                   (fs::temp_directory_path() / "bks_cli_badmeta").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(state + ": corrupt solver state: metadata 'seed'"), std::string::npos) << r.output;
}

TEST(Cli, TimePrintsLayersAndWritesTrace) {
  std::string trace = (fs::temp_directory_path() / "bks_cli_trace.json").string();
  auto r = run_cmd("time --model " + kLenet + " --iterations 2 --threads 1 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* layer : {"conv1", "pool2", "ip2", "Average forward-backward iteration"})
    EXPECT_NE(r.output.find(layer), std::string::npos) << layer;
  std::ifstream t(trace);
  std::string json((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"conv1\""), std::string::npos);
  auto te = run_cmd("time --model " + kLenet + " --iterations 1 --phase TEST --threads 1");
  EXPECT_EQ(te.code, 0) << te.output;
  EXPECT_EQ(run_cmd("time --model " + kLenet + " --phase SIDEWAYS").code, 2);
}

TEST(Cli, SigintSnapshotsThenStopsAndResumeContinues) {
  std::string dir = (fs::temp_directory_path() / "bks_cli_sigint").string();
  fs::remove_all(dir);
  std::string solver =
      write_temp("sigint_solver.prototxt", "net: '" + kLenet +
                                               "'\nbase_lr: 0.01 momentum: 0.9 lr_policy: 'fixed' max_iter: 100000\n"
                                               "display: 50 random_seed: 3\n");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open("/dev/null", 1);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(BKS_BINARY, BKS_BINARY, "train", "--solver", solver.c_str(), "--out", dir.c_str(), "--threads", "1",
          static_cast<char*>(nullptr));
    _exit(99);
  }
  // Wait until training has started (metrics appear), then interrupt.
  for (int i = 0; i < 600 && !fs::exists(fs::path(dir) / "metrics.jsonl"); ++i) usleep(50000);
  usleep(1500000);
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 130);
  std::string state;
  for (auto& e : fs::directory_iterator(fs::path(dir) / "snapshots"))
    if (e.path().extension() == ".solverstate") state = e.path().string();
  ASSERT_FALSE(state.empty()) << "an interrupt leaves a snapshot";
  // Resuming continues from the snapshot's iteration to the solver's max_iter, in the same
  // run directory.
  const std::string name = fs::path(state).stem().string();  // iter_<N>
  const int64_t from = std::stoll(name.substr(5));
  ASSERT_GT(from, 0);
  std::string resume_solver = write_temp(
      "sigint_resume.prototxt", "net: '" + kLenet + "'\nbase_lr: 0.01 momentum: 0.9 lr_policy: 'fixed' max_iter: " +
                                    std::to_string(from + 20) + "\ndisplay: 5 random_seed: 3\n");
  auto r = run_cmd("train --solver " + resume_solver + " --snapshot " + state + " --threads 1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Resumed from " + state + " at iteration " + std::to_string(from)), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "snapshots" / ("iter_" + std::to_string(from + 20) + ".solverstate")))
      << r.output;
  std::ifstream metrics(fs::path(dir) / "metrics.jsonl");
  int64_t last_iter = -1;
  for (std::string line; std::getline(metrics, line);) {
    const size_t at = line.find("\"iter\":");
    if (at != std::string::npos) last_iter = std::max<int64_t>(last_iter, std::stoll(line.substr(at + 7)));
  }
  EXPECT_GE(last_iter, from + 15) << "the resumed run's records follow the interrupted one's";
}

// ---- Real files of the model zoo with generated data (skipped where /work/zoo is absent) ----

std::string zoo_file(const std::string& rel) {
  const char* env = std::getenv("BKS_ZOO");
  return (fs::path(env ? env : "/work/zoo") / rel).string();
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  size_t n = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()), ++n)
    s.replace(at, from.size(), to);
  ASSERT_GT(n, 0u) << from;
}

// A colour PNG whose channel k at (y, x) is (37k + 5y + 3x + seed) mod 256.
void write_png(const fs::path& file, int h, int w, int seed) {
  std::vector<uint8_t> chw(static_cast<size_t>(3 * h * w));
  for (int k = 0; k < 3; ++k)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        chw[static_cast<size_t>((k * h + y) * w + x)] = static_cast<uint8_t>(37 * k + 5 * y + 3 * x + seed);
  std::ofstream(file, std::ios::binary) << encode_image(chw.data(), 3, h, w, false, false);
}

// BVLC's R-CNN fine-tuning file (CaffeNet, WindowData with context_pad 16, warp crops of 227,
// mirror and ImageNet's mean file; a loss without a top) trains on a window file over three
// generated images, with batches of 4 instead of 128.
TEST(Cli, ZooPascalFinetuneTrainsOnAWindowFile) {
  const std::string model = zoo_file("pascal_finetune/pascal_finetune_trainval_test.prototxt");
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const fs::path dir = fs::temp_directory_path() / "bks_cli_pascal";
  fs::remove_all(dir);
  fs::create_directories(dir / "img");
  std::ofstream windows(dir / "windows.txt");
  for (int i = 0; i < 3; ++i) {
    write_png(dir / "img" / (std::to_string(i) + ".png"), 90, 120, 50 * i);
    // Four foreground boxes (classes 1 to 20), three background ones, one between the thresholds.
    windows << "# " << i << "\n" << (dir / "img" / (std::to_string(i) + ".png")).string() << "\n3\n90\n120\n8\n";
    for (int k = 0; k < 4; ++k)
      windows << (1 + (5 * i + k) % 20) << " 0.8 " << 10 * k << " 5 " << 60 + 10 * k << " 70\n";
    for (int k = 0; k < 3; ++k) windows << "0 0.1 " << 30 * k << " 20 " << 30 * k + 29 << " 89\n";
    windows << "7 0.45 0 0 119 89\n";
  }
  windows.close();
  proto::BlobProto mean;
  for (int d : {1, 3, 256, 256}) mean.mutable_shape()->add_dim(d);
  for (int k = 0; k < 3 * 256 * 256; ++k) mean.add_data(100.f + static_cast<float>(k % 50));
  std::ofstream(dir / "mean.binaryproto", std::ios::binary) << mean.SerializeAsString();
  std::ifstream in(model);
  std::string net((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* split : {"trainval", "test"})
    replace_all(net, std::string("examples/finetune_pascal_detection/window_file_2007_") + split + ".txt",
                (dir / "windows.txt").string());
  replace_all(net, "data/ilsvrc12/imagenet_mean.binaryproto", (dir / "mean.binaryproto").string());
  replace_all(net, "batch_size: 128", "batch_size: 4");
  std::ofstream(dir / "net.prototxt") << net;
  std::ofstream(dir / "solver.prototxt") << "net: '" << (dir / "net.prototxt").string()
                                         << "'\nbase_lr: 0.001 lr_policy: 'fixed' momentum: 0.9 max_iter: 2 "
                                            "test_iter: 1 test_interval: 2 display: 1 random_seed: 5\n";
  auto r = run_cmd("train --solver " + (dir / "solver.prototxt").string() + " --out " + (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::string all((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("\"loss\""), std::string::npos) << "the loss without a top is reported by its layer's name\n"
                                                     << all;
  EXPECT_NE(all.find("\"accuracy\""), std::string::npos) << all;
  EXPECT_EQ(all.find("nan"), std::string::npos) << all;
}

// SegNet's training file (DenseImageData, class-weighted SoftmaxWithLoss) takes a training step
// on generated 360 x 480 CamVid-like pairs, batches of 1 instead of 4. The labels are the 11
// classes only: CamVid's void (11, the loss's ignore_label) would stop the file's Accuracy
// layer, which has no ignore_label (Caffe's reads past its per-class counts there).
TEST(Cli, ZooSegNetTrainsOnImageAndLabelPairs) {
  const std::string model = zoo_file("segnet/segnet_train.prototxt");
  if (!fs::exists(model)) GTEST_SKIP() << model << " is absent";
  const fs::path dir = fs::temp_directory_path() / "bks_cli_segnet";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream list(dir / "train.txt");
  for (int i = 0; i < 2; ++i) {
    write_png(dir / (std::to_string(i) + ".png"), 360, 480, 20 * i);
    std::vector<uint8_t> labels(360 * 480);
    for (size_t p = 0; p < labels.size(); ++p) labels[p] = static_cast<uint8_t>((p / 480 / 30 + p % 480 / 40 + i) % 11);
    std::ofstream(dir / (std::to_string(i) + "_label.png"), std::ios::binary)
        << encode_image(labels.data(), 1, 360, 480, false, false);
    list << (dir / (std::to_string(i) + ".png")).string() << " " << (dir / (std::to_string(i) + "_label.png")).string()
         << "\n";
  }
  list.close();
  std::ifstream in(model);
  std::string net((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  replace_all(net, "/SegNet/CamVid/train.txt", (dir / "train.txt").string());
  replace_all(net, "batch_size: 4", "batch_size: 1");
  std::ofstream(dir / "net.prototxt") << net;
  std::ofstream(dir / "solver.prototxt") << "net: '" << (dir / "net.prototxt").string()
                                         << "'\nbase_lr: 0.001 lr_policy: 'fixed' momentum: 0.9 max_iter: 1 "
                                            "display: 1 random_seed: 5\n";
  auto r = run_cmd("train --solver " + (dir / "solver.prototxt").string() + " --out " + (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::string all((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("\"loss\""), std::string::npos) << all;
  EXPECT_EQ(all.find("nan"), std::string::npos) << all;
}

}  // namespace
}  // namespace bks::test
