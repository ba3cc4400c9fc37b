// The dashboard's layer visualisation (Classifier::visualize) in-process on a tiny net:
// each layer's value as its layer produced it (not after an in-place ReLU wrote over it),
// histograms that add up to the blob, and how many channels / filters the images leave out.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "backend/backend.h"
#include "core/rng.h"
#include "formats/caffe_net.h"
#include "formats/weights.h"
#include "runtime/net.h"
#include "server/classify.h"
#include "server/value_summary.h"

namespace bks::server {
namespace {

namespace fs = std::filesystem;

// Input 1x4x4 -> conv1 (20 3x3 filters, pad 1) -> relu1 in place -> ip1 (3 outputs).
const char* kNet = R"(
layer { name: 'data' type: 'Input' top: 'data' input_param { shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1'
        convolution_param { num_output: 20 kernel_size: 3 pad: 1 } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'ip1' type: 'InnerProduct' bottom: 'conv1' top: 'ip1' inner_product_param { num_output: 3 } }
)";

// The net and weights uniform in [-1, 1) (so about half of conv1's outputs are negative).
ClassifyInput write_model() {
  const fs::path dir = fs::temp_directory_path() / "bks_server_visualize";
  fs::create_directories(dir);
  ClassifyInput in;
  in.net_file = (dir / "net.prototxt").string();
  in.weights_file = (dir / "weights.safetensors").string();
  in.shape = {1, 4, 4};
  in.classes = {"a", "b", "c"};
  std::ofstream(in.net_file) << kNet;
  proto::NetState st;
  st.set_phase(proto::TEST);
  CpuBackend be(1);
  ParamStore store;
  Net net(build_caffe_graph(load_net_file(in.net_file), st), proto::TEST, store, be, 1);
  Rng rng(3);
  for (auto& p : store.all())
    for (int64_t i = 0; i < p.data.numel(); ++i) p.data.f32()[i] = rng.uniform(-1.f, 1.f);
  save_weights(in.weights_file, store);
  return in;
}

const json& layer(const json& viz, const std::string& name) {
  for (const json& l : viz["layers"])
    if (l["name"] == name) return l;
  ADD_FAILURE() << "no layer " << name << " in " << viz.dump().substr(0, 300);
  static const json none = json::object();
  return none;
}

int64_t elements(const json& shape) {
  int64_t n = 1;
  for (const json& d : shape) n *= d.get<int64_t>();
  return n;
}

// A histogram with 32 bins over [min, max] of the statistics, counting every finite value.
void expect_histogram(const json& h, const json& stats, int64_t count, const std::string& what) {
  ASSERT_TRUE(h.is_object()) << what;
  ASSERT_EQ(h["counts"].size(), 32u) << what;
  int64_t sum = 0;
  for (const json& c : h["counts"]) sum += c.get<int64_t>();
  EXPECT_EQ(sum + h["non_finite"].get<int64_t>(), count) << what;
  EXPECT_EQ(h["lo"].get<double>(), stats["min"].get<double>()) << what;
  EXPECT_EQ(h["hi"].get<double>(), stats["max"].get<double>()) << what;
}

TEST(ServerVisualize, LayersShowTheirOwnValuesWithHistogramsAndCounts) {
  ClassifyInput in = write_model();
  std::vector<uint8_t> image(16);
  std::iota(image.begin(), image.end(), uint8_t{40});
  Classifier c;
  json viz = c.visualize(in, image.data());

  const json &conv = layer(viz, "conv1"), &relu = layer(viz, "relu1"), &ip = layer(viz, "ip1");
  // conv1's row is its output before relu1 overwrote it in place; relu1's is after.
  EXPECT_LT(conv["activation"]["min"].get<double>(), 0.0) << conv["activation"].dump();
  EXPECT_GE(relu["activation"]["min"].get<double>(), 0.0) << relu["activation"].dump();
  EXPECT_FALSE(conv.contains("in_place_after"));

  for (const json* l : {&conv, &relu, &ip}) {
    const std::string name = (*l)["name"];
    expect_histogram((*l)["activation_histogram"], (*l)["activation"], elements((*l)["shape"]), name);
  }
  expect_histogram(conv["weights_histogram"], conv["weights"], 20 * 1 * 3 * 3, "conv1 weights");
  expect_histogram(ip["weights_histogram"], ip["weights"], 3 * 20 * 4 * 4, "ip1 weights");

  // 20 channels, the image draws 16; 20 filters, all drawn (up to 32 are).
  EXPECT_EQ(conv["activation_channels"], 20);
  EXPECT_EQ(conv["activation_channels_shown"], 16);
  EXPECT_EQ(conv["weights_filters"], 20);
  EXPECT_EQ(conv["weights_filters_shown"], 20);
  EXPECT_EQ(ip["activation_channels"], 3);
  EXPECT_EQ(ip["activation_channels_shown"], 0) << "no image of a 1 x 3 blob";
  EXPECT_FALSE(ip.contains("activation_image"));
  EXPECT_EQ(ip["weights_filters"], 3);
  EXPECT_EQ(ip["weights_filters_shown"], 0) << "no image of inner product weights";

  // The net is kept for the next request, which sees the same (its hook gone with the first).
  json again = c.visualize(in, image.data());
  EXPECT_EQ(layer(again, "conv1")["activation"], conv["activation"]);
  EXPECT_EQ(layer(again, "relu1")["activation_histogram"], relu["activation_histogram"]);
}

TEST(ServerVisualize, HistogramBinsFiniteValuesAndCountsTheRest) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v{-1.f, 0.f, 0.5f, 1.f, 3.f, nan, inf, -inf};
  json h = value_histogram(v.data(), static_cast<int64_t>(v.size()));
  json s = value_stats(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(h["non_finite"], 3);
  EXPECT_EQ(h["lo"], -1.0);
  EXPECT_EQ(h["hi"], 3.0);
  EXPECT_EQ(s["min"], -1.0);
  EXPECT_EQ(s["max"], 3.0);
  EXPECT_DOUBLE_EQ(s["mean"].get<double>(), 3.5 / 5);
  ASSERT_EQ(h["counts"].size(), 32u);
  EXPECT_EQ(h["counts"][0], 1);   // -1
  EXPECT_EQ(h["counts"][8], 1);   // 0: (0 - -1) / 4 * 32
  EXPECT_EQ(h["counts"][12], 1);  // 0.5
  EXPECT_EQ(h["counts"][16], 1);  // 1
  EXPECT_EQ(h["counts"][31], 1);  // the top edge goes in the last bin

  const std::vector<float> same(7, 2.5f);
  json c = value_histogram(same.data(), 7);
  EXPECT_EQ(c["lo"], 2.5);
  EXPECT_EQ(c["hi"], 2.5);
  EXPECT_EQ(c["counts"][0], 7);
  EXPECT_EQ(c["non_finite"], 0);

  EXPECT_TRUE(value_histogram(nullptr, 0).is_null()) << "an empty blob has none";
}

}  // namespace
}  // namespace bks::server
