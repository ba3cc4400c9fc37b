// ONNX export: Caffe-defined nets written by `bakusoku export`, checked by the ONNX checker
// (Debian's python3-onnx, full check with shape inference) and run in ONNX Runtime
// (onnxruntime-node from bench/ort, installed by scripts/test.sh), whose outputs must match
// bakusoku's own deployed bundle of the same net and weights; the export read back by the
// importer must match too (tests/onnx_test_util.h: 1e-4 of the largest magnitude). Layers ONNX cannot express fail with one line, exit code 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli_util.h"
#include "onnx_test_util.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "formats/onnx_import.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "runtime/net.h"

namespace bks {
namespace {

namespace fs = std::filesystem;

const std::string kOrtDir = BKS_SOURCE_DIR "/bench/ort";

std::string temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("bks_onnx_export_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

using test::read_f32;

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

// Weights for the net: each layer's filler, then statistics and affine factors that make
// BatchNorm and Scale do something (the fillers give zero statistics and unit factors).
std::string write_weights(const std::string& model, const std::string& dir) {
  DeployOptions o;
  o.model = model;
  o.random_weights = true;
  DeployModel m = load_deploy_model(o);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> small(-0.2f, 0.2f), positive(0.5f, 1.5f);
  for (const Node& n : m.graph.nodes)
    for (size_t i = 0; i < n.params.size(); ++i) {
      Tensor& t = m.weights.at(n.params[i].key);
      float* p = t.f32();
      if (n.type == "BatchNorm")
        for (int64_t k = 0; k < t.numel(); ++k) p[k] = i == 0 ? small(rng) : i == 1 ? positive(rng) : 1.f;
      else if (n.type == "Scale")
        for (int64_t k = 0; k < t.numel(); ++k) p[k] = i == 0 ? positive(rng) : small(rng);
      else if (n.type == "Convolution" || n.type == "InnerProduct" || n.type == "Deconvolution")
        if (i == 1)
          for (int64_t k = 0; k < t.numel(); ++k) p[k] = small(rng);
    }
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (auto& [k, t] : m.weights) list.push_back({k, &t});
  const std::string path = dir + "/weights.safetensors";
  save_safetensors(path, list, {{"format", "bakusoku-weights"}});
  return path;
}

std::vector<float> random_input(int64_t n) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::string dims_text(const Shape& s) {
  std::string t;
  for (int64_t d : s) {
    if (!t.empty()) t += ',';
    t += std::to_string(d);
  }
  return t;
}

// bakusoku's own answer: the net deployed (every pass) with the same weights.
std::vector<float> run_bakusoku(const std::string& model, const std::string& weights, const std::vector<float>& x,
                                int64_t batch) {
  DeployOptions o;
  o.model = model;
  o.weights = weights;
  o.batch = batch;
  Tensor y = test::run_deployed(o, x);
  return {y.f32(), y.f32() + y.numel()};
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  test::expect_close(got.data(), static_cast<int64_t>(got.size()), want, what);
}

bool ort_installed() { return fs::exists(kOrtDir + "/node_modules/onnxruntime-node"); }

// Exports `model` (batch `batch`), checks it, runs it in ONNX Runtime at `run_batch` and
// compares with bakusoku.
void export_and_compare(const std::string& name, const std::string& model, const Shape& input, int64_t run_batch,
                        bool dynamic = false) {
  const std::string dir = temp_dir(name);
  const std::string weights = write_weights(model, dir), onnx = dir + "/" + name + ".onnx";
  test::CmdResult r = test::run_cmd("export --model " + model + " --weights " + weights + " -o " + onnx +
                                    " --batch " + std::to_string(input[0]) + (dynamic ? " --dynamic-batch" : ""));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + onnx + ": ONNX opset 13"), std::string::npos) << r.output;

  const std::string check = "/usr/bin/python3 -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), "
                            "full_check=True)' " + onnx + " > " + dir + "/check.log 2>&1";
  ASSERT_EQ(std::system(check.c_str()), 0) << "the ONNX checker refuses " << onnx << ", see " << dir << "/check.log";

  Shape shape = input;
  shape[0] = run_batch;
  const std::vector<float> x = random_input(shape_numel(shape));
  const std::vector<float> want = run_bakusoku(model, weights, x, run_batch);
  test::expect_close(test::run_imported(onnx, x, dynamic ? shape : Shape{}), want, name + " read back by the importer");

  if (!ort_installed()) GTEST_SKIP() << "ONNX Runtime is not installed: npm ci --prefix bench/ort --ignore-scripts";
  write_f32(dir + "/x.f32", x);
  const std::string ort = "node " + kOrtDir + "/ort_run.mjs " + onnx + " " + dir + "/x.f32 " + dims_text(shape) + " " +
                          dir + "/y.f32 > " + dir + "/ort.log 2>&1";
  ASSERT_EQ(std::system(ort.c_str()), 0) << "ONNX Runtime failed on " << onnx << ", see " << dir << "/ort.log";
  expect_close(read_f32(dir + "/y.f32"), want, name + " in ONNX Runtime");
}

const char* kLeNet = R"(name: "LeNet"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }
)";

// The other layers the exporter writes, at sizes where Caffe's ceil-mode windows hang over
// the end (MAX k3 s2 of 10 gives 5, floor would give 4; AVE k3 s2 of 10 likewise), with a
// BatchNorm and Scale that no convolution absorbs.
const char* kLayers = R"(name: "layers"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 20 dim: 20 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 stride: 2 pad: 1 weight_filler { type: "msra" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "bn1" type: "BatchNorm" bottom: "pool1" top: "pool1" }
layer { name: "sc1" type: "Scale" bottom: "pool1" top: "pool1" scale_param { bias_term: true } }
layer { name: "lrn1" type: "LRN" bottom: "pool1" top: "lrn1" lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 k: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "lrn1" top: "lrn1" relu_param { negative_slope: 0.1 } }
layer { name: "conv_a" type: "Convolution" bottom: "lrn1" top: "a"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "msra" } } }
layer { name: "conv_b" type: "Convolution" bottom: "lrn1" top: "conv_b"
  convolution_param { num_output: 4 kernel_size: 3 pad: 2 dilation: 2 group: 2 weight_filler { type: "msra" } } }
layer { name: "pool_b" type: "Pooling" bottom: "conv_b" top: "b" pooling_param { pool: AVE kernel_size: 3 stride: 1 pad: 1 } }
layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }
layer { name: "prod" type: "Eltwise" bottom: "a" bottom: "b" top: "prod" eltwise_param { operation: PROD } }
layer { name: "max" type: "Eltwise" bottom: "a" bottom: "b" top: "max" eltwise_param { operation: MAX } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" eltwise_param { operation: SUM coeff: 0.5 coeff: -1 } }
layer { name: "cat2" type: "Concat" bottom: "cat" bottom: "prod" bottom: "max" bottom: "sum" top: "cat2" }
layer { name: "deconv" type: "Deconvolution" bottom: "cat2" top: "deconv"
  convolution_param { num_output: 6 kernel_size: 2 stride: 2 weight_filler { type: "msra" } } }
layer { name: "sig" type: "Sigmoid" bottom: "deconv" top: "deconv" }
layer { name: "pool_c" type: "Pooling" bottom: "deconv" top: "pool_c" pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "pow" type: "Power" bottom: "pool_c" top: "pow" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "tanh" type: "TanH" bottom: "pow" top: "pow" }
layer { name: "perm" type: "Permute" bottom: "pow" top: "perm" permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "flat" type: "Flatten" bottom: "perm" top: "flat" }
layer { name: "ip" type: "InnerProduct" bottom: "flat" top: "ip" inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
)";

TEST(OnnxExport, LeNetRunsInOnnxRuntimeAsInBakusoku) {
  const std::string dir = temp_dir("lenet_net");
  write_text(dir + "/lenet.prototxt", kLeNet);
  export_and_compare("lenet", dir + "/lenet.prototxt", {4, 1, 28, 28}, 4);
}

TEST(OnnxExport, ResNet18RunsInOnnxRuntimeAsInBakusoku) {
  export_and_compare("resnet18", BKS_SOURCE_DIR "/examples/resnet/resnet18_cifar.prototxt", {2, 3, 32, 32}, 2);
}

TEST(OnnxExport, EveryExportedLayerTypeRunsInOnnxRuntimeAsInBakusoku) {
  const std::string dir = temp_dir("layers_net");
  write_text(dir + "/layers.prototxt", kLayers);
  export_and_compare("layers", dir + "/layers.prototxt", {2, 3, 20, 20}, 2);
}

TEST(OnnxExport, DynamicBatchRunsAtAnotherBatchSize) {
  const std::string dir = temp_dir("lenet_dynamic_net");
  write_text(dir + "/lenet.prototxt", kLeNet);
  export_and_compare("lenet_dynamic", dir + "/lenet.prototxt", {4, 1, 28, 28}, 3, true);
}

TEST(OnnxExport, ALayerOnnxCannotExpressIsOneLineExitTwo) {
  const std::string dir = temp_dir("refused");
  write_text(dir + "/net.prototxt", R"(name: "n"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 4 dim: 4 } } }
layer { name: "lrn" type: "LRN" bottom: "data" top: "lrn" lrn_param { norm_region: WITHIN_CHANNEL } }
)");
  test::CmdResult r = test::run_cmd("export --model " + dir + "/net.prototxt --random-weights -o " + dir + "/n.onnx");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "error: " + dir + "/net.prototxt:3: layer 'lrn' (LRN): norm_region WITHIN_CHANNEL has no ONNX operator\n");
  EXPECT_FALSE(fs::exists(dir + "/n.onnx"));
  write_text(dir + "/net2.prototxt", R"(name: "n"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 dim: 4 dim: 4 } } }
layer { name: "spp" type: "SPP" bottom: "data" top: "spp" spp_param { pyramid_height: 1 } }
)");
  r = test::run_cmd("export --model " + dir + "/net2.prototxt --random-weights -o " + dir + "/n.onnx");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "error: " + dir + "/net2.prototxt:3: layer 'spp' (SPP): ONNX export does not support layer type SPP "
                      "(docs/onnx.md lists those it does)\n");
}

}  // namespace
}  // namespace bks
