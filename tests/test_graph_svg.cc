// The dashboard's network drawing: the TRAIN net laid out by Graphviz's `dot`, every name
// escaped, shapes readable, a clear error without Graphviz, and the child process that
// runs it bounded in time and size.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "formats/caffe_net.h"
#include "ops/shape_inference.h"
#include "server/api_error.h"
#include "server/dot_text.h"
#include "server/filter_command.h"
#include "server/graph_svg.h"
#include "server/net_dot.h"

namespace bks::server {
namespace {
namespace fs = std::filesystem;

// A file of this process's own: CTest runs each test as a process of its own, two at once,
// and two tests writing one name raced (one read the file while the other rewrote it).
std::string write_temp(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / fmt::format("bks_graph_svg_{}_{}", getpid(), name);
  std::ofstream(p) << text;
  return p.string();
}

// The drawing, also kept with its DOT text in $BKS_KEEP_DRAWINGS (when set) for a person
// to look at.
std::string draw(const std::string& net_file, const std::string& keep_as) {
  std::string svg = network_svg(net_file);
  if (const char* dir = std::getenv("BKS_KEEP_DRAWINGS")) {
    std::ofstream(fs::path(dir) / (keep_as + ".svg")) << svg;
    NetLoad nl = load_net_file(net_file);
    Graph g = build_caffe_graph(nl, net_state(nl, proto::TRAIN, {}));
    infer_shapes(g, proto::TRAIN);
    std::ofstream(fs::path(dir) / (keep_as + ".dot")) << network_dot(g);
  }
  return svg;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_svg_fills_width(const std::string& svg) {
  EXPECT_TRUE(svg.rfind("<?xml", 0) == 0 || svg.rfind("<svg", 0) == 0) << svg.substr(0, 200);
  std::smatch tag;
  ASSERT_TRUE(std::regex_search(svg, tag, std::regex("<svg[^>]*>")));
  const std::string t = tag.str();
  EXPECT_TRUE(has(t, "viewBox=\"")) << t;
  EXPECT_TRUE(has(t, "width=\"100%\"")) << t;
  EXPECT_FALSE(has(t, "height=")) << "a fixed height would keep it from scaling: " << t;
  EXPECT_TRUE(has(svg, "</svg>"));
}

const std::string kLeNet = std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/lenet_train_test.prototxt";

TEST(GraphSvg, LeNetShowsTheTrainBatchAndReadableShapes) {
  const std::string svg = draw(kLeNet, "lenet");
  expect_svg_fills_width(svg);
  EXPECT_TRUE(has(svg, "64×20×24×24")) << "conv1's output at the TRAIN batch";
  EXPECT_FALSE(has(svg, "100×")) << "the TEST net's batch";
  EXPECT_FALSE(has(svg, "()")) << "a scalar shape said as ()";
  EXPECT_TRUE(has(svg, "scalar")) << "the loss";
  EXPECT_TRUE(has(svg, "kernel 5×5"));
  EXPECT_TRUE(has(svg, "num_output 20"));
  EXPECT_TRUE(has(svg, "SoftmaxWithLoss"));
  EXPECT_TRUE(has(svg, "batch 64")) << "the data layer";
}

TEST(GraphSvg, ResNetWithBranchesDraws) {
  const std::string svg =
      draw(std::string(BKS_SOURCE_DIR) + "/examples/fashion_mnist/resnet_train_test.prototxt", "resnet");
  expect_svg_fills_width(svg);
  EXPECT_TRUE(has(svg, "Eltwise"));
  EXPECT_TRUE(has(svg, "SUM"));
  EXPECT_FALSE(has(svg, "()"));
}

const char* kInPlaceNet = R"(
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 8 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool" type: "Pooling" bottom: "conv1" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
)";

TEST(GraphSvg, InPlaceLayersJoinTheBoxTheyFollow) {
  NetLoad nl = load_net_file(write_temp("inplace.prototxt", kInPlaceNet));
  Graph g = build_caffe_graph(nl, net_state(nl, proto::TRAIN, {}));
  infer_shapes(g, proto::TRAIN);
  const std::string dot = network_dot(g);
  // Nodes in file order: in n0, conv1 n1, relu1 n2 (in conv1's box), pool n3.
  EXPECT_FALSE(has(dot, "n2 [")) << dot;
  EXPECT_TRUE(has(dot, "+ <B>relu1</B>&#160;ReLU")) << dot;
  EXPECT_TRUE(has(dot, "n1 -> n3 [label=<<FONT POINT-SIZE=\"9\" COLOR=\"#556677\">8×4×6×6</FONT>>]")) << dot;
  EXPECT_FALSE(std::regex_search(dot, std::regex(R"(\b(n\d+) -> \1\b)"))) << "no loops: " << dot;
  EXPECT_TRUE(has(dot, "MAX, kernel 2×2, stride 2")) << dot;
  EXPECT_TRUE(has(dot, "pad 1")) << dot;
}

TEST(GraphSvg, NamesFromThePrototxtAreEscaped) {
  // A layer named  a"b<c>&d\e  with a new line in it, and a top with bad UTF-8.
  const std::string net = R"(
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a\"b<c>&d\\e\nf" type: "InnerProduct" bottom: "data" top: "x\377</text>"
        inner_product_param { num_output: 5 } }
)";
  const std::string svg = draw(write_temp("escape.prototxt", net), "escape");
  expect_svg_fills_width(svg);
  EXPECT_TRUE(has(svg, "a&quot;b&lt;c&gt;&amp;d\\e f")) << svg;
  EXPECT_FALSE(has(svg, "b<c")) << svg;
  EXPECT_FALSE(has(svg, "x?</text>")) << svg;
  EXPECT_TRUE(has(svg, "x?&lt;/text&gt;")) << svg;

  EXPECT_EQ(dot_html_text("<&>\"'\t\x01"), "&lt;&amp;&gt;&quot;&#39;  ");
  EXPECT_EQ(dot_html_text("caf\xc3\xa9 \xc3 \xed\xa0\x80"), "caf\xc3\xa9 ? ???") << "valid UTF-8 kept, bad bytes '?'";
  EXPECT_EQ(shape_text({}), "scalar");
  EXPECT_EQ(shape_text({64, 1, 28, 28}), "64×1×28×28");
}

TEST(GraphSvg, WithoutGraphvizTheErrorSaysWhatToInstall) {
  const std::string file = write_temp("inplace.prototxt", kInPlaceNet);
  const fs::path empty = fs::temp_directory_path() / "bks_graph_svg_empty_path";
  fs::create_directories(empty);
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", empty.c_str(), 1);
  try {
    network_svg(file);
    ADD_FAILURE() << "drew without dot on PATH";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_TRUE(has(e.what(), "install Debian's graphviz")) << e.what();
    EXPECT_TRUE(has(e.what(), "scripts/install_deps.sh")) << e.what();
  }
  setenv("PATH", old_path.c_str(), 1);
  try {
    network_svg(file, "/nonexistent/dot");
    ADD_FAILURE() << "drew with a dot that is not there";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
  }
}

TEST(GraphSvg, ThousandsOfLayersAnswerInTime) {
  // 4000 layers (2000 InnerProduct, each with a ReLU in place): a drawing, or a clear
  // error once Graphviz has had its time.
  const int blocks = 2000;
  std::string net = R"(layer { name: "in" type: "Input" top: "x0" input_param { shape { dim: 2 dim: 4 } } })";
  for (int i = 0; i < blocks; ++i)
    net += fmt::format(R"(
layer {{ name: "fc{0}" type: "InnerProduct" bottom: "x{0}" top: "x{1}" inner_product_param {{ num_output: 4 }} }}
layer {{ name: "relu{0}" type: "ReLU" bottom: "x{1}" top: "x{1}" }})",
                       i, i + 1);
  const std::string file = write_temp("big.prototxt", net);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const std::string svg = network_svg(file);
    EXPECT_TRUE(has(svg, "fc1999")) << svg.size();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_TRUE(has(e.what(), "layers took Graphviz longer than")) << e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, kDrawTimeoutS + 5);
  std::printf("%d layers: %.1f s\n", 2 * blocks, s);
}

TEST(GraphSvg, FitToWidthKeepsTheViewBox) {
  EXPECT_EQ(fit_svg_to_width("<?xml?>\n<svg width=\"900pt\" height=\"80pt\" viewBox=\"0 0 900 80\">x</svg>"),
            "<?xml?>\n<svg width=\"100%\" viewBox=\"0 0 900 80\">x</svg>");
  EXPECT_EQ(fit_svg_to_width("<svg width=\"300pt\" height=\"80pt\" viewBox=\"0.00 0.00 300.00 80.00\">", 700),
            "<svg width=\"100%\" viewBox=\"-200.00 0.00 700.00 80.00\">")
      << "a small drawing centred, not blown up";
}

TEST(FilterCommand, FeedsInputAndReadsOutput) {
  std::string big(3 << 20, 'x');  // more than a pipe holds either way: no deadlock
  for (size_t i = 0; i < big.size(); i += 1000) big[i] = '\n';
  FilterResult r = run_filter({"cat"}, big, 30, size_t{8} << 20);
  EXPECT_EQ(r.end, FilterResult::End::exited);
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(r.output == big) << r.output.size();
  r = run_filter({"sh", "-c", "echo oops >&2; exit 3"}, "", 10, 100);
  EXPECT_EQ(r.end, FilterResult::End::exited);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.errors, "oops\n");
  r = run_filter({"bks-no-such-program"}, "x", 10, 100);
  EXPECT_EQ(r.end, FilterResult::End::not_found);
}

TEST(FilterCommand, KillsOnTimeoutAndOnTooMuchOutput) {
  const auto t0 = std::chrono::steady_clock::now();
  FilterResult r = run_filter({"sleep", "30"}, "", 0.3, 100);
  EXPECT_EQ(r.end, FilterResult::End::timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  r = run_filter({"yes"}, "", 10, 1000);
  EXPECT_EQ(r.end, FilterResult::End::too_large);
  // A program that stops reading early does not stop the server (no SIGPIPE).
  r = run_filter({"true"}, std::string(1 << 20, 'x'), 10, 100);
  EXPECT_EQ(r.end, FilterResult::End::exited);
  EXPECT_EQ(r.code, 0);
}

}  // namespace
}  // namespace bks::server
