// Parsing Caffe files: every example in the repository, and each kind of bad input giving
// an InputError that names the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/file_io.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "runtime/net.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

std::string write_temp(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("bks_parse_" + name);
  std::ofstream(p) << text;
  return p.string();
}

// Expects building `text` as a net to throw InputError whose message contains `needle`.
void expect_net_error(const std::string& text, const std::string& needle) {
  std::string path = write_temp("net.prototxt", text);
  try {
    NetLoad nl = load_net_file(path);
    proto::NetState st;
    st.set_phase(proto::TRAIN);
    CpuBackend be(1);
    ParamStore store;
    Net net(build_caffe_graph(nl, st), proto::TRAIN, store, be, 1);
    FAIL() << "no error for: " << needle;
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << "names the file: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
}

TEST(Parse, EveryExamplePrototxtBuildsInBothPhases) {
  int count = 0;
  for (auto& e : fs::recursive_directory_iterator(fs::path(BKS_SOURCE_DIR) / "examples")) {
    if (e.path().extension() != ".prototxt") continue;
    std::string text = read_file(e.path().string(), "example");
    if (text.find("base_lr") != std::string::npos) {
      proto::SolverParameter sp;
      EXPECT_NO_THROW(read_prototxt(e.path().string(), sp)) << e.path();
      continue;
    }
    NetLoad nl = load_net_file(e.path().string());
    for (Phase ph : {proto::TRAIN, proto::TEST}) {
      proto::NetState st;
      st.set_phase(ph);
      CpuBackend be(1);
      ParamStore store;
      EXPECT_NO_THROW(Net(build_caffe_graph(nl, st), ph, store, be, 1)) << e.path() << " " << proto::Phase_Name(ph);
    }
    ++count;
  }
  EXPECT_GE(count, 2);
}

TEST(Parse, SyntaxErrorNamesLineAndColumn) {
  std::string path =
      write_temp("bad.prototxt", "name: \"x\"\nlayer {\n  name: \"a\"\n  type: \"ReLU\"\n  bottom: \n}\n");
  proto::NetParameter p;
  try {
    read_prototxt(path, p);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":6:1"), std::string::npos) << e.what();
  }
}

TEST(Parse, UnknownFieldIsAnError) {
  std::string path = write_temp("field.prototxt", "layer {\n  name: \"a\"\n  type: \"ReLU\"\n  colour: 3\n}\n");
  proto::NetParameter p;
  try {
    read_prototxt(path, p);
    FAIL();
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(":4:"), std::string::npos) << m;
    EXPECT_NE(m.find("colour"), std::string::npos) << m;
  }
}

// Caffe accepts a layer name used twice (BVLC's mnist_autoencoder has two 'loss' layers);
// names key the weights here, so the later one gets a name of its own.
TEST(Parse, ALayerNameUsedTwiceIsRenamed) {
  std::string path = write_temp("twice.prototxt",
                                "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 3 } } }\n"
                                "layer { name: 'r' type: 'ReLU' bottom: 'x' top: 'x' }\n"
                                "layer { name: 'r' type: 'ReLU' bottom: 'x' top: 'y' }\n"
                                "layer { name: 'r_2' type: 'TanH' bottom: 'y' top: 'z' }\n");
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  Graph g = build_caffe_graph(load_net_file(path), st);
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[1].name, "r");
  EXPECT_EQ(g.nodes[2].name, "r_2");
  EXPECT_EQ(g.nodes[3].name, "r_2_2") << "a name taken by a later layer is not reused";
}

// Caffe's AutoTopBlobs: a loss layer without a top gets one (named after the layer, or after
// it with " (automatic)" when a blob has that name), which counts in the loss with weight 1
// and which no other layer can read.
TEST(Parse, ALossWithoutATopGetsOneAsInCaffe) {
  const std::string inputs =
      "layer { name: 'in' type: 'Input' top: 'x' top: 'label' input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } "
      "} }\n";
  const std::string losses =
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'x' bottom: 'label' }\n"
      "layer { name: 'x2' type: 'EuclideanLoss' bottom: 'x' bottom: 'x' loss_weight: 0.5 }\n"
      "layer { name: 'r' type: 'ReLU' bottom: 'x' top: 'x2' }\n";
  std::string path = write_temp("autotop.prototxt", inputs + losses);
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  Graph g = build_caffe_graph(load_net_file(path), st);
  ASSERT_EQ(g.nodes[1].outputs.size(), 1u);
  EXPECT_EQ(g.values[g.nodes[1].outputs[0]].name, "loss");
  ASSERT_EQ(g.nodes[2].outputs.size(), 1u);
  EXPECT_EQ(g.values[g.nodes[2].outputs[0]].name, "x2 (automatic)") << "the blob name x2 is taken";
  CpuBackend be(1);
  ParamStore store;
  Net net(std::move(g), proto::TRAIN, store, be, 1);
  EXPECT_EQ(net.loss_weight(net.graph().find_value("loss")), 1.f);
  EXPECT_EQ(net.loss_weight(net.graph().find_value("x2 (automatic)")), 0.5f);
  // Only losses: another layer without a top is still an error, and no layer reads the new top.
  expect_net_error(inputs + "layer { name: 'r' type: 'ReLU' bottom: 'x' }", "layer 'r'");
  expect_net_error(inputs +
                       "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'x' bottom: 'label' }\n"
                       "layer { name: 'r' type: 'ReLU' bottom: 'loss' top: 'y' }",
                   "bottom 'loss' is not produced");
}

// A field of a Caffe fork bakusoku lacks: the error names the layer, its type and the field
// (inside its parameter message), not protobuf's message type.
TEST(Parse, ForkFieldNamesTheLayerAndField) {
  auto error_of = [](const std::string& file, const std::string& text) {
    std::string path = write_temp(file, text);
    proto::NetParameter p;
    try {
      read_prototxt(path, p);
    } catch (const InputError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.find("bks.proto"), std::string::npos) << "no internal type name: " << m;
      return m.substr(m.find(file));
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  const std::string tail = " is not part of BVLC Caffe or the forks bakusoku supports";
  EXPECT_EQ(error_of("fork1.prototxt",
                     "name: 'n'\nlayer {\n  name: 'in'\n  type: 'Input'\n  top: 'x'\n}\nlayer {\n  name: 'conv1'\n"
                     "  type: 'Convolution'\n  bottom: 'x'\n  top: 'y'\n  foo_param { bar: 1 }\n}\n"),
            "fork1.prototxt:12: layer 'conv1' (Convolution): field 'foo_param'" + tail);
  EXPECT_EQ(error_of("fork2.prototxt",
                     "layer { name: 'p' type: 'Pooling'\n pooling_param { pool: MAX kernel_size: 2 dilation: 2 } }\n"),
            "fork2.prototxt:2: layer 'p' (Pooling): field 'pooling_param.dilation'" + tail);
  EXPECT_EQ(error_of("fork3.prototxt", "name: 'n'\nquantize: true\n"), "fork3.prototxt:2: field 'quantize'" + tail);
}

TEST(Parse, SemanticErrors) {
  const char* input =
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }\n";
  expect_net_error(std::string(input) + "layer { name: 'q' type: 'Quantum' bottom: 'x' top: 'y' }",
                   "unknown layer type 'Quantum'");
  expect_net_error(std::string(input) + "layer { name: 'r' type: 'ReLU' bottom: 'nope' top: 'y' }",
                   "bottom 'nope' is not produced");
  expect_net_error(std::string(input) + "layer { name: 'e' type: 'Eltwise' bottom: 'x' bottom: 'y' top: 'z' }\n",
                   "not produced");
  expect_net_error(std::string(input) +
                       "layer { name: 'c' type: 'Convolution' bottom: 'x' top: 'c' convolution_param { num_output: 4 "
                       "kernel_size: 3 } }\n"
                       "layer { name: 'e' type: 'Eltwise' bottom: 'x' bottom: 'c' top: 'z' }",
                   "differs from bottom 0");
  expect_net_error(std::string(input) + "layer { name: 'r' type: 'ReLU' top: 'y' }", "takes 1 bottom");
  expect_net_error(
      "layer { name: 'd' type: 'Data' top: 'x' top: 'l' data_param { source: '/nonexistent/train-images-idx3-ubyte' "
      "batch_size: 4 } }",
      "data source not found");
  expect_net_error(std::string(input) +
                       "layer { name: 'r' type: 'ReLU' bottom: 'x' top: 'y' include { phase: TEST } "
                       "exclude { stage: 'a' } }",
                   "layer 'r' gives both include and exclude rules");
  expect_net_error(
      "layer { name: 'd' type: 'Data' top: 'x' top: 'l' transform_param { force_color: true force_gray: true } "
      "data_param { source: '/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz' batch_size: 4 } }",
      "transform_param.force_color and force_gray cannot both be set");
  expect_net_error(std::string(input) +
                       "layer { name: 'c' type: 'Convolution' bottom: 'x' top: 'c' param { lr_mult: 1 } param { } "
                       "param { } convolution_param { num_output: 4 kernel_size: 3 } }",
                   "3 'param' specs");
}

TEST(Parse, ErrorNamesTheLayerLine) {
  std::string text =
      "name: 'n'\n"
      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }\n"
      "\n"
      "layer {\n name: 'p'\n type: 'Pooling'\n bottom: 'x'\n top: 'y'\n pooling_param { pool: MAX kernel_size: 9 "
      "}\n}\n";
  expect_net_error(text, "bks_parse_net.prototxt:4: layer 'p' (Pooling)");
}

TEST(Parse, NetLevelInputs) {
  std::string path = write_temp("legacy.prototxt",
                                "input: 'data'\ninput_dim: 2\ninput_dim: 3\ninput_dim: 4\ninput_dim: 4\n"
                                "layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'y' }\n");
  NetLoad nl = load_net_file(path);
  proto::NetState st;
  CpuBackend be(1);
  ParamStore store;
  Net net(build_caffe_graph(nl, st), proto::TEST, store, be, 1);
  EXPECT_EQ(net.value("data").shape(), (Shape{2, 3, 4, 4}));
}

}  // namespace
}  // namespace bks
