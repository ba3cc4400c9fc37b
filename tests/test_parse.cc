// Parsing Caffe files: every example in the repository, and each kind of bad input giving
// an InputError that names the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli_util.h"
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

// Protobuf quotes the name or value typed; one of 500 KB (a crafted file, or a request to
// the server, which parses in its own process) is still one short error line, not a crash.
TEST(Parse, AHugeUnknownNameOrValueIsOneShortError) {
  const std::string huge(500000, 'z');
  for (const std::string& text :
       {"layer {\n  name: \"a\"\n  " + huge + ": 3\n}\n",
        "layer {\n  name: \"a\"\n  type: \"Pooling\"\n  pooling_param { pool: " + huge + " }\n}\n",
        "layer {\n  name: \"a\"\n  type: \"ReLU\"\n  propagate_down: " + huge + "\n}\n"}) {
    std::string path = write_temp("huge.prototxt", text);
    proto::NetParameter p;
    try {
      read_prototxt(path, p);
      FAIL();
    } catch (const InputError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(path + ":"), std::string::npos) << m.substr(0, 200);
      EXPECT_LT(m.size(), 2000u) << m.substr(0, 200);
    }
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

// Thousands of layers of one name (a crafted file) are renamed in linear time: each name's
// next free suffix is remembered, not searched for from _2 again (which took hours).
TEST(Parse, ManyLayersOfOneNameAreRenamedQuickly) {
  std::string text = "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 } } }\n";
  for (int k = 0; k < 200000; ++k) text += "layer { name: 'r' type: 'ReLU' bottom: 'x' top: 'x' }\n";
  text += "layer { name: 'r_7' type: 'ReLU' bottom: 'x' top: 'x' }\n";
  std::string path = write_temp("many_names.prototxt", text);
  proto::NetState st;
  st.set_phase(proto::TRAIN);
  Graph g = build_caffe_graph(load_net_file(path), st);
  ASSERT_EQ(g.nodes.size(), 200002u);
  EXPECT_EQ(g.nodes[1].name, "r");
  EXPECT_EQ(g.nodes[2].name, "r_2");
  EXPECT_EQ(g.nodes[200000].name, "r_200000");
  EXPECT_EQ(g.nodes[200001].name, "r_7_2");  // r_7 was taken by the 7th 'r'
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

// The parse error of `text` (as file `file`), from the file's name on; fails the test
// when it parses.
std::string parse_error(const std::string& file, const std::string& text) {
  const std::string path = write_temp(file, text);
  try {
    NetLoad nl = load_net_file(path);
  } catch (const InputError& e) {
    const std::string m = e.what();
    return m.find(file) == std::string::npos ? m : m.substr(m.find(file));
  }
  ADD_FAILURE() << "no error for " << text;
  return {};
}

const char* kInput = "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 1 dim: 4 } } }\n";

// A field below the layer's own (a filler inside inner_product_param) is named by its path
// from the layer, as the file spells it, in current and V1 nets; a layer without a type says so.
TEST(Parse, NestedFieldIsNamedByItsPathFromTheLayer) {
  const std::string tail = " is not part of BVLC Caffe or the forks bakusoku supports";
  EXPECT_EQ(
      parse_error("nested.prototxt", std::string(kInput) +
                                         "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'ip'\n"
                                         "  inner_product_param { num_output: 10 weight_filler { typ: 'x' } } }\n"),
      "nested.prototxt:3: layer 'ip' (InnerProduct): field 'inner_product_param.weight_filler.typ'" + tail);
  EXPECT_EQ(parse_error("nested_v1.prototxt",
                        "layers { name: 'ip' type: INNER_PRODUCT\n"
                        "  inner_product_param { bias_filler { typ: 'x' } } }\n"),
            "nested_v1.prototxt:2: layer 'ip' (INNER_PRODUCT): field 'inner_product_param.bias_filler.typ'" + tail);
  EXPECT_EQ(parse_error("no_type.prototxt", std::string(kInput) + "layer { name: 'ip' typo: 'InnerProduct' }\n"),
            "no_type.prototxt:2: layer 'ip' (no type): field 'typo'" + tail);
}

// No error about a prototxt names protobuf's message types (bks.proto.FillerParameter):
// each names the layer and the field's path, on one line with the file and line (and the
// column where a value is wrong).
TEST(Parse, ErrorsNameFieldPathsNeverMessageTypes) {
  const std::string in = kInput;
  const std::string ip = "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'ip' ";
  const std::string ip_where = "layer 'ip' (InnerProduct): field 'inner_product_param.";
  const struct {
    std::string text, expected;
  } cases[] = {
      {in + ip + "inner_product_param { weight_filler { typ: 'x' } } }",
       ":2: " + ip_where + "weight_filler.typ' is not part"},
      {in + ip + "inner_product_param { num_output: x } }", ":2:97: " + ip_where + "num_output': expected integer"},
      {in + ip + "inner_product_param { bias_term: maybe } }",
       ":2:96: " + ip_where + "bias_term': expected true or false, got: maybe"},
      {in + ip + "inner_product_param { weight_filler { variance_norm: SIDEWAYS } } }",
       ":2:116: " + ip_where +
           "weight_filler.variance_norm': unknown value SIDEWAYS; it takes FAN_IN, FAN_OUT or AVERAGE"},
      {in + ip + "inner_product_param { num_output: 1 num_output: 2 } }",
       ":2:99: " + ip_where + "num_output' is given more than once"},
      {in + ip + "[foo]: 1 }", ":2: layer 'ip' (InnerProduct): field '[foo]' is not part"},
      {in + "layer { name: 'c' type: 'Clip' bottom: 'x' top: 'c'\n clip_param { min: 0 } }",
       ":2: layer 'c' (Clip): field 'clip_param.max' is required"},
      {in + ip + "inner_product_param { 5 } }", ":2:85: layer 'ip' (InnerProduct): in 'inner_product_param': expected"},
      {in + ip + "inner_product_param { num_output: 10 }",
       ":2:101: layer 'ip' (InnerProduct): expected identifier, "
       "got: the end of the file"},
      {"input_shape { dum: 1 }", ":1: field 'input_shape.dum' is not part"},
      {"layers { name: 'r' type: RELUU }", ":1:26: layer 'r': field 'type': unknown value RELUU"},
  };
  const std::regex type_name(R"([A-Z]\w*(Parameter|Proto)\b)");
  for (const auto& c : cases) {
    const std::string e = parse_error("types.prototxt", c.text);
    EXPECT_EQ(e.rfind("types.prototxt:", 0), 0u) << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << e << "\nexpected: " << c.expected;
    EXPECT_EQ(e.find("bks.proto"), std::string::npos) << e;
    EXPECT_FALSE(std::regex_search(e, type_name)) << "a message type's name: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

// The command line prints such an error as one line "error: FILE:LINE: ..." and exits 2;
// a binary file that is not Caffe's names what it should be, not a message type.
TEST(Parse, CliPrintsTheFieldPathOnOneLineAndExitsTwo) {
  const std::string path =
      write_temp("cli_nested.prototxt", std::string(kInput) +
                                            "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'ip'\n"
                                            "  inner_product_param { num_output: 10 weight_filler { typ: 'x' } } }\n");
  auto r = test::run_cmd("time --model " + path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "error: " + path +
                          ":3: layer 'ip' (InnerProduct): field 'inner_product_param.weight_filler.typ' is not part of "
                          "BVLC Caffe or the forks bakusoku supports\n");
  const std::string weights = write_temp("cli_garbage.caffemodel", "\xff\xff\xff not protobuf");
  r = test::run_cmd("upgrade_net_proto_binary " + weights + " " + weights + ".out");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "error: " + weights + ": not a valid Caffe weights file (.caffemodel)\n");
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
