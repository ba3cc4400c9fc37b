// ONNX import: PyTorch/torchvision exports (tests/onnx_fixtures.py, run at test time with
// Debian's torch) imported, run and compared with PyTorch's own output, before and after
// deploy's passes; bad and crafted files fail with one line and exit code 2.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "onnx_test_util.h"
#include "core/error.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "formats/caffe_net.h"
#include "formats/onnx_import.h"
#include "formats/weights.h"
#include "runtime/net.h"

namespace bks {
namespace {

namespace fs = std::filesystem;

// The fixtures, made once per build tree (CTest's OnnxFixtures test makes them first; a
// direct run of this binary makes them when they are missing).
const std::string& fixtures() {
  static const std::string dir = [] {
    const std::string d = BKS_ONNX_FIXTURES;
    if (!fs::exists(d + "/stamp")) {
      const std::string cmd = "/usr/bin/python3 " BKS_SOURCE_DIR "/tests/onnx_fixtures.py " + d + " > " + d +
                              ".log 2>&1";
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("fixture script failed, see " + d + ".log");
    }
    return d;
  }();
  return dir;
}

std::string fixture(const std::string& name) { return fixtures() + "/" + name; }

using test::expect_close;
using test::read_f32;
using test::run_imported;

Tensor run_deployed(const std::string& path, const std::vector<float>& input) {
  DeployOptions o;
  o.model = path;
  return test::run_deployed(o, input);
}

class OnnxModel : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxModel, MatchesPyTorchImportedAndDeployed) {
  const std::string name = GetParam();
  const std::string path = fixture(name + ".onnx");
  const auto input = read_f32(fixture(name + ".in.f32"));
  const auto want = read_f32(fixture(name + ".out.f32"));
  expect_close(run_imported(path, input), want, name + " as imported");
  expect_close(run_deployed(path, input), want, name + " deployed");
}

INSTANTIATE_TEST_SUITE_P(Exports, OnnxModel,
                         ::testing::Values("lenet", "lenet_view", "ops_mix", "activations", "upsample", "mean_head",
                                           "transformer", "transformer_opset14", "resnet18", "mobilenet_v2"),
                         [](const auto& info) { return std::string(info.param); });

// Backward through every imported layer of the transformers: the output's sum as the loss,
// its gradient for the weights of the first layer (whose path runs back through every
// other) and of the second encoder layer's Q/K/V projection, against central differences.
class OnnxGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxGradient, MatchesFiniteDifferencesThroughTheWholeGraph) {
  const std::string path = fixture(std::string(GetParam()) + ".onnx");
  NetLoad nl = import_onnx(path);
  nl.param.mutable_layer(nl.param.layer_size() - 1)->add_loss_weight(1.f);
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  CpuBackend be(2);
  ParamStore store;
  Net net(build_caffe_graph(nl, st), proto::TRAIN, store, be, 1);
  load_weights(nl.weights, store, path);
  test::set_input(net.value(net.inputs().at(0)), read_f32(fixture(std::string(GetParam()) + ".in.f32")));
  net.forward(0);
  store.clear_grads();
  net.backward();
  for (const char* key : {"/embed/MatMul.0", "/encoder/layers.1/self_attn/MatMul.0"}) {
    const int i = store.find(key);
    ASSERT_GE(i, 0) << key;
    Param& p = store.at(i);
    const Tensor grad = p.grad.clone();
    for (int64_t k = 0; k < p.data.numel(); k += p.data.numel() / 7 + 1) {
      float& w = p.data.f32()[k];
      const float w0 = w, h = 1e-2f;
      w = w0 + h;
      const double up = net.forward(0);
      w = w0 - h;
      const double down = net.forward(0);
      w = w0;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grad.f32()[k], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << key << " element " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, OnnxGradient, ::testing::Values("transformer", "transformer_opset14"),
                         [](const auto& info) { return std::string(info.param); });

TEST(OnnxImport, TranslatesToTheExpectedLayers) {
  NetLoad nl = import_onnx(fixture("lenet.onnx"));
  std::map<std::string, int> types;
  for (const auto& l : nl.param.layer()) ++types[l.type()];
  // Pad (zero), Dropout and the Clip bounds' Constants leave no layer; BatchNorm brings a Scale.
  std::map<std::string, int> want{{"Input", 1},     {"Convolution", 2}, {"ReLU", 3},  {"Pooling", 2},
                                  {"BatchNorm", 1}, {"Scale", 1},       {"Flatten", 1}, {"InnerProduct", 3},
                                  {"ReLU6", 1},     {"Softmax", 1},     {"Power", 1}};
  EXPECT_EQ(types, want);
  EXPECT_EQ(nl.param.layer(0).input_param().shape(0).dim_size(), 4);
  EXPECT_EQ(nl.weights.at("/fc1/Gemm.0").shape(), (Shape{120, 400}));  // InnerProduct's (out, in)
}

// Exported with a dynamic batch, the attention's Reshape shapes are computed from Shape
// nodes: the batch given as the input shape folds into them.
TEST(OnnxImport, TransformerWithADynamicBatchTakesTheGivenOne) {
  const std::string path = fixture("transformer_dynamic.onnx");
  const auto input = read_f32(fixture("transformer_dynamic.in.f32"));
  const auto want = read_f32(fixture("transformer_dynamic.out.f32"));
  expect_close(run_imported(path, input, {3, 7, 16}), want, "as imported");
  DeployOptions o;
  o.model = path;
  o.input_shape = {3, 7, 16};
  expect_close(test::run_deployed(o, input), want, "deployed");
}

TEST(OnnxImport, TransformerBecomesAttentionLayers) {
  auto types_of = [](const std::string& name) {
    std::map<std::string, int> types;
    const NetLoad nl = import_onnx(fixture(name));
    for (const auto& l : nl.param.layer()) ++types[l.type()];
    return types;
  };
  // Per layer: Q K^T and its weights times V; the slices of the joint Q/K/V projection.
  std::map<std::string, int> t = types_of("transformer.onnx");
  EXPECT_EQ(t["BatchMatMul"], 4);
  EXPECT_EQ(t["StridedSlice"], 6);
  EXPECT_EQ(t["LayerNorm"], 5);  // two per layer and the encoder's last
  EXPECT_EQ(t["Erf"], 1);        // the first layer's GELU, written out
  EXPECT_EQ(t["Softmax"], 2);
  // Before opset 17 each LayerNorm is its pieces: two means over the last axis, x - mean
  // and the division by the deviation broadcast, the deviation a Power.
  std::map<std::string, int> d = types_of("transformer_opset14.onnx");
  EXPECT_EQ(d.count("LayerNorm"), 0u);
  EXPECT_EQ(d["Arithmetic"], 10);
  EXPECT_EQ(d["Reduction"], 11);  // and the mean over the sequence
}

TEST(OnnxImport, DynamicBatchIsOneOrTheGivenShape) {
  const std::string path = fixture("lenet_view.onnx");
  EXPECT_EQ(import_onnx(path).param.layer(0).input_param().shape(0).dim(0), 1);
  NetLoad nl = import_onnx(path, {3, 1, 28, 28});
  EXPECT_EQ(nl.param.layer(0).input_param().shape(0).dim(0), 3);
  // The view's folded shape keeps the batch as "copy the input's" (0).
  for (const auto& l : nl.param.layer())
    if (l.type() == "Reshape") {
      EXPECT_EQ(l.reshape_param().shape().dim(0), 0);
    }
}

// --- errors: one line, exit code 2 -------------------------------------------------------

void expect_cli_error(const std::string& args, const std::string& line) {
  test::CmdResult r = test::run_cmd(args);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "error: " + line + "\n");
}

TEST(OnnxErrors, TruncatedFile) {
  const std::string p = fixture("truncated.onnx");
  expect_cli_error("time --model " + p,
                   p + ": not a readable ONNX model (the protobuf does not parse: a truncated or foreign file)");
}

TEST(OnnxErrors, UnknownOperatorNamesNodeTypeAndOpset) {
  const std::string p = fixture("unknown_op.onnx");
  expect_cli_error("deploy --model " + p + " -o /dev/null",
                   p + ": node 'einsum1' has operator Einsum (opset 14), which the ONNX importer does not support");
}

TEST(OnnxErrors, OpsetOutsideRange) {
  const std::string p = fixture("opset9.onnx");
  expect_cli_error("time --model " + p, p + ": opset 9 is not supported (bakusoku imports ONNX opsets 11 to 18)");
}

TEST(OnnxErrors, MissingExternalData) {
  const std::string p = fixture("external.onnx");
  expect_cli_error("time --model " + p, p + ": initializer 'w': its data is in external file 'missing_weights.bin', "
                                            "which does not exist (" + fixtures() + "/missing_weights.bin)");
}

// Crafted models, written here with the same generated schema.
struct Crafted {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  explicit Crafted(int opset = 13, std::vector<int64_t> in = {1, 3, 8, 8}) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("crafted");
    auto* x = g->add_input();
    x->set_name("x");
    auto* tt = x->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : in) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d > 0) dim->set_dim_value(d);
      else dim->set_dim_param("dyn");
    }
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_name(op + "_node");
    n->set_op_type(op);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  onnx::TensorProto* init(const std::string& name, std::vector<int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  std::string save(const std::string& name) {
    g->add_output()->set_name("y");
    const std::string p = (fs::temp_directory_path() / ("bks_onnx_" + name + ".onnx")).string();
    std::ofstream f(p, std::ios::binary);
    m.SerializeToOstream(&f);
    return p;
  }
};

void expect_import_error(const std::string& path, const std::string& message) {
  try {
    import_onnx(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": " + message);
  }
}

TEST(OnnxErrors, HugeDimsWithoutDataFailBeforeAllocating) {
  Crafted c;
  c.init("w", {int64_t{1} << 20, int64_t{1} << 20});
  c.node("Add", {"x", "w"}, "y");
  expect_import_error(c.save("huge"), "initializer 'w': 0 values for dims [1048576,1048576] (1099511627776 expected)");
  Crafted d;
  d.init("w", {int64_t{1} << 40, int64_t{1} << 40});
  d.node("Add", {"x", "w"}, "y");
  expect_import_error(d.save("overflow"), "initializer 'w': dims 1099511627776x1099511627776 are negative or too large");
}

TEST(OnnxErrors, ReshapeToAnOverflowingShape) {
  Crafted c;
  auto* t = c.g->add_initializer();
  t->set_name("s");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(3);
  for (int64_t v : {int64_t{1} << 40, int64_t{1} << 40, int64_t{0}}) t->add_int64_data(v);
  c.node("Reshape", {"x", "s"}, "y");
  expect_import_error(c.save("reshape"),
                      "node 'Reshape_node' (Reshape): the shape [1099511627776,1099511627776,0] is too large");
}

TEST(OnnxErrors, GatherThatWouldAllocateTooMuch) {
  Crafted c;
  auto* d = c.init("d", {1, 1 << 20});
  d->set_raw_data(std::string(4 << 20, '\0'));
  auto* t = c.g->add_initializer();
  t->set_name("i");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(1 << 20);
  t->set_raw_data(std::string(8 << 20, '\0'));
  c.node("Gather", {"d", "i"}, "y");
  try {
    import_onnx(c.save("gather"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'Gather_node' (Gather): shape (1048576,1048576) is too large"),
              std::string::npos)
        << e.what();
  }
}

TEST(OnnxErrors, GatherFoldingBeyondTheConstantLimit) {
  Crafted c;
  c.init("d", {4096, 1})->set_raw_data(std::string(4 * 4096, '\0'));
  auto* t = c.g->add_initializer();
  t->set_name("i");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(8192);
  t->set_raw_data(std::string(8 * 8192, '\0'));
  auto* n = c.node("Gather", {"d", "i"}, "y");
  auto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  // (4096, 8192) floats: 2^25 values, over the 2^24 that folding may make.
  expect_import_error(c.save("gather_limit"), "node 'Gather_node' (Gather): folding it would make [4096,8192] "
                                              "(33554432 values); constants computed at import are limited to 2^24");
}

// Each Gather folds (4096, 1) along axis 1 by 4,096 indices into 2^24 values, from 48 KB:
// many such nodes in a tiny file are stopped by the import's total, not by the machine's
// memory.
TEST(OnnxErrors, FoldingBeyondTheTotalConstantLimit) {
  Crafted c;
  c.init("d", {4096, 1})->set_raw_data(std::string(4 * 4096, '\0'));
  auto* t = c.g->add_initializer();
  t->set_name("i");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(4096);
  t->set_raw_data(std::string(8 * 4096, '\0'));
  for (int k = 0; k < 12; ++k) {
    auto* n = c.node("Gather", {"d", "i"}, fmt::format("t{}", k));
    n->set_name(fmt::format("gather{}", k));
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  }
  c.node("Relu", {"x"}, "y");
  expect_import_error(c.save("fold_total"),
                      "node 'gather8' (Gather): constants computed at import would exceed 2^27 values in all");
}

TEST(OnnxErrors, RawDataOfTheWrongSize) {
  Crafted c;
  c.init("w", {3})->set_raw_data(std::string(7, '\0'));
  c.node("Add", {"x", "w"}, "y");
  expect_import_error(c.save("raw"), "initializer 'w': 7 bytes of data for dims [3] (12 bytes expected)");
}

TEST(OnnxErrors, AsymmetricConvPads) {
  Crafted c;
  auto* w = c.init("w", {4, 3, 3, 3});
  for (int i = 0; i < 4 * 27; ++i) w->add_float_data(0.f);
  auto* n = c.node("Conv", {"x", "w"}, "y");
  auto* a = n->add_attribute();
  a->set_name("pads");
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t p : {0, 0, 1, 1}) a->add_ints(p);
  expect_import_error(c.save("pads"),
                      "node 'Conv_node' (Conv): asymmetric pads [0,0,1,1] (top, left, bottom, right) are not "
                      "supported; Caffe's layers pad both sides alike");
}

TEST(OnnxErrors, DynamicSpatialDimensionNeedsInputShape) {
  Crafted c(13, {0, 3, 0, 8});
  c.node("Relu", {"x"}, "y");
  const std::string p = c.save("dynamic");
  expect_import_error(p, "graph input 'x' has dynamic dimension 2 ('dyn'); give --input-shape");
  EXPECT_NO_THROW(import_onnx(p, {2, 3, 5, 8}));
}

void add_string_attr(onnx::NodeProto* n, const char* name, const char* value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

void add_int_initializer(Crafted& c, const std::string& name, std::vector<int64_t> v) {
  auto* t = c.g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

// Gelu is an operator from opset 20, past the importer's 18; a model that carries it anyway
// imports, in both forms.
TEST(OnnxImport, GeluExactAndTanh) {
  for (const char* approx : {"none", "tanh"}) {
    Crafted c(18, {1, 2, 3, 4});
    add_string_attr(c.node("Gelu", {"x"}, "y"), "approximate", approx);
    std::vector<float> in(24), want(24);
    for (size_t i = 0; i < in.size(); ++i) {
      const double x = (static_cast<double>(i) - 12) * 0.37;
      in[i] = static_cast<float>(x);
      want[i] = static_cast<float>(
          std::string(approx) == "tanh"
              ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
              : 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))));
    }
    expect_close(run_imported(c.save(std::string("gelu_") + approx), in), want, approx);
  }
  Crafted bad(18);
  add_string_attr(bad.node("Gelu", {"x"}, "y"), "approximate", "fast");
  expect_import_error(bad.save("gelu_bad"), "node 'Gelu_node' (Gelu): approximate 'fast' is not an ONNX value (none, tanh)");
}

// Slice on a computed tensor with negative, clamped and strided bounds, against the same
// indexing done here: x[:, 1:, ::-2, -3:INT64_MAX].
TEST(OnnxImport, SliceOfAComputedTensor) {
  Crafted c(13, {2, 3, 5, 4});
  add_int_initializer(c, "starts", {1, -1, -3});
  add_int_initializer(c, "ends", {int64_t{1} << 62, -int64_t{1} << 62, int64_t{1} << 62});
  add_int_initializer(c, "axes", {1, 2, -1});
  add_int_initializer(c, "steps", {1, -2, 1});
  c.node("Relu", {"x"}, "r");
  c.node("Slice", {"r", "starts", "ends", "axes", "steps"}, "y");
  std::vector<float> in(2 * 3 * 5 * 4), want;
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  for (int n = 0; n < 2; ++n)
    for (int ch = 1; ch < 3; ++ch)
      for (int h = 4; h >= 0; h -= 2)
        for (int w = 1; w < 4; ++w) want.push_back(in[((n * 3 + ch) * 5 + h) * 4 + w]);
  expect_close(run_imported(c.save("slice"), in), want, "slice");
  Crafted e(13, {2, 3, 5, 4});
  add_int_initializer(e, "starts", {3});
  add_int_initializer(e, "ends", {3});
  e.node("Slice", {"x", "starts", "ends"}, "y");
  expect_import_error(e.save("slice_empty"), "node 'Slice_node' (Slice): the slice [3:3:1] of axis 0 (size 2) is empty");
}

TEST(OnnxErrors, MatMulOfTensorsThatDoNotBroadcast) {
  Crafted c(13, {2, 3, 4});
  add_int_initializer(c, "shape", {3, 4, 2});
  c.node("Reshape", {"x", "shape"}, "b");
  c.node("MatMul", {"x", "b"}, "y");
  expect_import_error(c.save("matmul_bcast"), "node 'MatMul_node' (MatMul): [2] and [3] do not broadcast");
}

TEST(OnnxErrors, Opset19) {
  Crafted c(19);
  c.node("Relu", {"x"}, "y");
  expect_import_error(c.save("opset19"), "opset 19 is not supported (bakusoku imports ONNX opsets 11 to 18)");
}

// Bytes of a real export flipped at random: every result is a model or an InputError.
TEST(OnnxErrors, CorruptedExportsFailCleanly) {
  std::ifstream f(fixture("lenet_view.onnx"), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(good.size(), 1000u);
  const std::string p = (fs::temp_directory_path() / "bks_onnx_corrupt.onnx").string();
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL, state >> 33; };
  int failed = 0;
  for (int round = 0; round < 300; ++round) {
    std::string bad = good;
    // The graph's structure is in the first and last few kB; the weights' bytes between.
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t region = next() % 2 ? next() % 4096 : bad.size() - 1 - next() % 4096;
      bad[region] = static_cast<char>(next());
    }
    std::ofstream(p, std::ios::binary) << bad;
    try {
      NetLoad nl = import_onnx(p);
      proto::NetState st;
      st.set_phase(proto::TEST);
      build_caffe_graph(nl, st);
    } catch (const InputError&) {
      ++failed;
    }
  }
  EXPECT_GT(failed, 0);  // some flips must have been noticed
}

// --- the verbs ---------------------------------------------------------------------------

TEST(OnnxCli, DeployAndTime) {
  const std::string p = fixture("lenet_view.onnx");
  const std::string out = (fs::temp_directory_path() / "bks_onnx_lenet.bks").string();
  test::CmdResult d = test::run_cmd("deploy --model " + p + " -o " + out + " --threads 2");
  EXPECT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("wrote " + out), std::string::npos) << d.output;
  test::CmdResult t = test::run_cmd("time --model " + p + " --iterations 2 --threads 2 --input-shape 4,1,28,28");
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("Average forward iteration"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("at batch 4)"), std::string::npos) << t.output;
}

// The transformer through the verbs: deployed (the passes leave its new layers alone),
// benchmarked from the bundle, and timed in TRAIN phase (an imported model has no loss, so
// that runs no backward; OnnxGradient checks backward).
TEST(OnnxCli, TransformerDeployBenchAndTrainTime) {
  const std::string p = fixture("transformer.onnx");
  const std::string out = (fs::temp_directory_path() / "bks_onnx_transformer.bks").string();
  test::CmdResult d = test::run_cmd("deploy --model " + p + " -o " + out + " --threads 2 --print-graph");
  EXPECT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("BatchMatMul"), std::string::npos) << d.output;
  test::CmdResult b = test::run_cmd("bench " + out + " --iterations 2 --threads 2");
  EXPECT_EQ(b.code, 0) << b.output;
  test::CmdResult t = test::run_cmd("time --model " + p + " --iterations 2 --threads 2 --phase TRAIN");
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("Average forward-backward"), std::string::npos) << t.output;
}

}  // namespace
}  // namespace bks
