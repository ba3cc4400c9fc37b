// The SSD fork's layers: Permute, Normalize, PriorBox and DetectionOutput, each against a
// direct computation; DetectionOutput in a small net fed by a PriorBox.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "detection_oracle.h"
#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "op_harness.h"
#include "runtime/net.h"

namespace bks::test {
namespace {

// ---- Permute ----

TEST(Permute, MovesChannelsLastAsSsdHeadsDo) {
  OpHarness h("type: 'Permute' permute_param { order: 0 order: 2 order: 3 order: 1 }", {{2, 3, 4, 5}});
  h.randomize_inputs();
  h.forward();
  ASSERT_EQ(h.out[0].shape(), (Shape{2, 4, 5, 3}));
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 5; ++x) EXPECT_EQ(h.out[0].f32()[((n * 4 + y) * 5 + x) * 3 + c], at4(h.in[0], n, c, y, x));
  h.check_gradients();
}

TEST(Permute, AxesLeftOutFollowInOrder) {
  OpHarness h("type: 'Permute' permute_param { order: 2 }", {{2, 3, 4}});  // = order 2 0 1
  h.randomize_inputs();
  h.forward();
  ASSERT_EQ(h.out[0].shape(), (Shape{4, 2, 3}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(h.out[0].f32()[(c * 2 + a) * 3 + b], h.in[0].f32()[(a * 3 + b) * 4 + c]);
  h.check_gradients();
}

TEST(Permute, BadOrderNamesTheField) {
  EXPECT_NE(input_error_of([] {
              OpHarness("type: 'Permute' permute_param { order: 1 order: 1 }", {{2, 3}});
            }).find("permute_param.order names axis 1 twice"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              OpHarness("type: 'Permute' permute_param { order: 3 }", {{2, 3, 4}});
            }).find("permute_param.order 3 must be less than"),
            std::string::npos);
}

// ---- Normalize ----

// y = s[c] x / sqrt(sum of x^2 over the sample (across_spatial) or the position + eps).
Tensor naive_normalize(const Tensor& x, const Tensor& s, bool across, bool shared, double eps) {
  const int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / (n * c);
  Tensor y(x.shape());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < sp; ++i) {
      double sum = eps;
      for (int64_t k = 0; k < c; ++k)
        for (int64_t j = across ? 0 : i; j < (across ? sp : i + 1); ++j) {
          double v = x.f32()[(b * c + k) * sp + j];
          sum += v * v;
        }
      for (int64_t k = 0; k < c; ++k) {
        const int64_t o = (b * c + k) * sp + i;
        y.f32()[o] = static_cast<float>((shared ? s.f32()[0] : s.f32()[k]) * x.f32()[o] / std::sqrt(sum));
      }
    }
  return y;
}

struct NormCase {
  bool across, shared;
};
class NormalizeModes : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormalizeModes, ForwardAndGradients) {
  const NormCase k = GetParam();
  OpHarness h(fmt::format("type: 'Normalize' norm_param {{ across_spatial: {} channel_shared: {} eps: 0.001 }}",
                          k.across, k.shared),
              {{2, 3, 2, 3}});
  h.randomize_inputs();
  ASSERT_EQ(h.params[0].numel(), k.shared ? 1 : 3);
  Tensor want = naive_normalize(h.in[0], h.params[0], k.across, k.shared, 0.001);
  h.forward();
  expect_close(h.out[0], want, 1e-5f, "Normalize");
  h.check_gradients(1e-3f, 1e-2f);
}
INSTANTIATE_TEST_SUITE_P(Modes, NormalizeModes,
                         ::testing::Values(NormCase{true, true}, NormCase{true, false}, NormCase{false, true},
                                           NormCase{false, false}),
                         [](const auto& i) {
                           return std::string(i.param.across ? "AcrossSpatial" : "PerPosition") +
                                  (i.param.shared ? "SharedScale" : "ChannelScale");
                         });

TEST(Normalize, ChannelScaleHasOneValuePerChannel) {
  OpHarness h("type: 'Normalize' norm_param { scale_filler { type: 'constant' value: 20 } channel_shared: false }",
              {{1, 4, 2, 2}});
  EXPECT_EQ(h.params[0].shape(), (Shape{4}));
}

TEST(Normalize, NegativeEpsNamesTheField) {
  EXPECT_NE(input_error_of([] {
              OpHarness("type: 'Normalize' norm_param { eps: -1 }", {{1, 2, 2, 2}});
            }).find("norm_param.eps must be non-negative"),
            std::string::npos);
}

// ---- PriorBox ----

void expect_priors(const PriorSpec& s, Shape feat, Shape image) {
  std::vector<Shape> in{feat};
  if (!image.empty()) in.push_back(image);
  OpHarness h(prior_box_layer(s), in, proto::TEST);
  EXPECT_FALSE(h.facts().has_backward);
  h.randomize_inputs();
  h.forward();
  Tensor want = naive_prior_box(s, feat[2], feat[3], image.empty() ? 0 : image[2], image.empty() ? 0 : image[3]);
  ASSERT_EQ(h.out[0].shape(), want.shape());
  expect_close(h.out[0], want, 1e-6f, "priors");
}

TEST(PriorBox, MobileNetSsdStyleHead) {
  PriorSpec s;
  s.min_size = {60};
  s.max_size = {150};
  s.aspect_ratio = {2, 3};
  s.variance = {0.1, 0.1, 0.2, 0.2};
  expect_priors(s, {1, 8, 3, 4}, {1, 3, 30, 40});
  // By hand: cell (0, 0) of a 3 x 4 map over 30 x 40 is centred at (5, 5); its first box is
  // 60 x 60 pixels, its second sqrt(60 * 150) on each side, then 2, 1/2, 3, 1/3.
  OpHarness h(prior_box_layer(s), {{1, 8, 3, 4}, {1, 3, 30, 40}}, proto::TEST);
  h.forward();
  const float* p = h.out[0].f32();
  EXPECT_NEAR(p[0], (5 - 30) / 40.0, 1e-6);
  EXPECT_NEAR(p[1], (5 - 30) / 30.0, 1e-6);
  EXPECT_NEAR(p[6], (5 + std::sqrt(9000.0) / 2) / 40.0, 1e-6);
  EXPECT_EQ(h.out[0].dim(2), 3 * 4 * 6 * 4);
  EXPECT_FLOAT_EQ(p[h.out[0].dim(2) + 2], 0.2f) << "variance of xmax";
}

TEST(PriorBox, GivenImageSizeStepsClipAndSeveralSizes) {
  PriorSpec s;
  s.min_size = {8, 16};
  s.max_size = {12, 20};
  s.aspect_ratio = {2};
  s.clip = true;
  s.variance = {0.1};
  s.img_h = 32;
  s.img_w = 48;
  s.step_h = 9;
  s.step_w = 11;
  s.offset = 0.25;
  expect_priors(s, {2, 1, 3, 5}, {});
}

TEST(PriorBox, RepeatedRatiosNoFlipDefaultVarianceAndTruncatedSizes) {
  PriorSpec s;
  s.min_size = {30.7};  // used as 30, as the fork truncates
  s.aspect_ratio = {2, 2, 1, 0.5};
  s.flip = false;
  expect_priors(s, {1, 2, 2, 2}, {1, 3, 20, 20});
  OpHarness h(prior_box_layer(s), {{1, 2, 2, 2}, {1, 3, 20, 20}}, proto::TEST);
  EXPECT_EQ(h.out[0].dim(2), 2 * 2 * 3 * 4) << "ratios 1, 2, 0.5";
  h.forward();
  EXPECT_NEAR(h.out[0].f32()[2] - h.out[0].f32()[0], 30.0 / 20, 1e-6) << "30 pixels wide, not 30.7";
}

TEST(PriorBox, BadFieldsAreNamed) {
  auto err = [](const char* params, std::vector<Shape> in = {{1, 1, 2, 2}, {1, 3, 8, 8}}) {
    return input_error_of([&] { OpHarness(std::string("type: 'PriorBox' prior_box_param { ") + params + " }", in); });
  };
  EXPECT_NE(err("max_size: 4").find("prior_box_param.min_size is required"), std::string::npos);
  EXPECT_NE(err("min_size: 4 max_size: 3").find("prior_box_param.max_size 3 must be greater"), std::string::npos);
  EXPECT_NE(err("min_size: 4 img_size: 8 img_h: 8 img_w: 8").find("img_size or img_h/img_w"), std::string::npos);
  EXPECT_NE(err("min_size: 4 step: 2 step_h: 2").find("step or step_h/step_w"), std::string::npos);
  EXPECT_NE(err("min_size: 4 variance: 0.1 variance: 0.2").find("prior_box_param.variance takes 1 or 4"),
            std::string::npos);
  EXPECT_NE(err("min_size: 4", {{1, 1, 2, 2}}).find("the image as bottom 1"), std::string::npos);
}

// ---- DetectionOutput in a net: PriorBox over a 2 x 2 map of a 40 x 40 image ----

// Per cell: a 20-pixel square, a sqrt(20 * 30) square, a 2:1 and a 1:2 box; the boxes of
// one cell overlap (IoU 0.67 and 0.55 with the first), neighbouring cells' squares touch.
PriorSpec small_priors() {
  PriorSpec s;
  s.min_size = {20};
  s.max_size = {30};
  s.aspect_ratio = {2};
  s.variance = {0.1, 0.1, 0.2, 0.2};
  return s;
}
constexpr int64_t kPriors = 16;

struct DetNet {
  CpuBackend backend{2};
  ParamStore store;
  std::unique_ptr<Net> net;
  DetNet(const DetSpec& s, int64_t num) {
    const int64_t L = s.share_location ? 1 : s.num_classes;
    const std::string text = fmt::format(R"(
layer {{ name: "in" type: "Input" top: "data" top: "feat" top: "loc" top: "conf"
  input_param {{ shape {{ dim: 1 dim: 3 dim: 40 dim: 40 }} shape {{ dim: {0} dim: 2 dim: 2 dim: 2 }}
                shape {{ dim: {0} dim: {1} }} shape {{ dim: {0} dim: {2} }} }} }}
layer {{ name: "pb" bottom: "feat" bottom: "data" top: "prior" {3} }}
layer {{ name: "det" bottom: "loc" bottom: "conf" bottom: "prior" top: "det" {4} }}
)",
                                         num, kPriors * L * 4, kPriors * s.num_classes, prior_box_layer(small_priors()),
                                         detection_output_layer(s));
    NetLoad nl;
    nl.source = "det.prototxt";
    parse_prototxt_string(text, nl.source, nl.param, &nl.layer_lines);
    proto::NetState st;
    st.set_phase(proto::TEST);
    net = std::make_unique<Net>(build_caffe_graph(nl, st), proto::TEST, store, backend, 5);
  }
  Tensor& in(const char* name) { return net->value(name); }
  // Runs the net; checks the rows against the direct computation and returns them.
  std::vector<DetRow> check(const DetSpec& s) {
    Tensor prior = naive_prior_box(small_priors(), 2, 2, 40, 40);
    std::vector<DetRow> want = naive_detections(in("loc").clone(), in("conf").clone(), prior, s);
    net->forward();
    const Tensor& got = net->value("det");
    expect_close(got, padded_detections(want, got.dim(2)), 1e-5f, "detections");
    return want;
  }
};

void fill(Tensor& t, float lo, float hi, uint64_t seed) {
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(lo, hi);
}

TEST(DetectionOutput, NmsSuppressesOverlappingBoxesOfAClass) {
  DetSpec s;
  s.num_classes = 2;
  s.nms_threshold = 0.45;
  s.has_confidence_threshold = true;
  s.confidence_threshold = 0.01;
  s.code_type = "CENTER_SIZE";
  DetNet t(s, 1);
  t.in("loc").zero();  // the boxes are the priors
  Tensor& conf = t.in("conf");
  conf.zero();
  // Class 1: cell 0's priors 0, 1, 2 (IoU 0.67 and 0.55 with prior 0), and the first
  // prior of cells 1, 2, 3 with equal scores (ties keep prior order, as the fork's stable sort).
  const float score[kPriors] = {0.9f, 0.8f, 0.7f, 0, 0.6f, 0, 0, 0, 0.6f, 0, 0, 0, 0.6f};
  for (int64_t p = 0; p < kPriors; ++p) conf.f32()[p * 2 + 1] = score[p];
  std::vector<DetRow> rows = t.check(s);
  ASSERT_EQ(rows.size(), 4u) << "priors 1 and 2 are suppressed by prior 0";
  // By hand: cell 0's 20-pixel square around (10, 10), then those of cells 1, 2, 3.
  const DetRow want[4] = {{0, 1, 0.9, 0, 0, 0.5, 0.5},
                          {0, 1, 0.6, 0.5, 0, 1, 0.5},
                          {0, 1, 0.6, 0, 0.5, 0.5, 1},
                          {0, 1, 0.6, 0.5, 0.5, 1, 1}};
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 7; ++k) EXPECT_NEAR(rows[r][k], want[r][k], 1e-6) << r << ", " << k;
  // A threshold above 0.67 keeps every box of the class.
  DetSpec loose = s;
  loose.nms_threshold = 0.7;
  DetNet u(loose, 1);
  u.in("loc").zero();
  u.in("conf").copy_from(conf);
  EXPECT_EQ(u.check(loose).size(), 6u) << "priors 0, 1, 2 of cell 0 and 4, 8, 12";
}

TEST(DetectionOutput, SharedLocationsRandomBatch) {
  DetSpec s;
  s.num_classes = 4;
  s.nms_threshold = 0.45;
  s.top_k = 6;
  s.keep_top_k = 7;
  s.has_confidence_threshold = true;
  s.confidence_threshold = 0.2;
  s.code_type = "CENTER_SIZE";
  DetNet t(s, 3);
  EXPECT_EQ(t.net->value("det").shape(), (Shape{1, 1, 21, 7})) << "keep_top_k rows per image";
  fill(t.in("loc"), -1, 1, 11);
  fill(t.in("conf"), 0, 1, 12);
  std::vector<DetRow> rows = t.check(s);
  EXPECT_GT(rows.size(), 6u);
  // keep_top_k cut some image down: without it there are more rows.
  DetSpec all = s;
  all.keep_top_k = -1;
  EXPECT_GT(naive_detections(t.in("loc"), t.in("conf"), naive_prior_box(small_priors(), 2, 2, 40, 40), all).size(),
            rows.size());
}

TEST(DetectionOutput, PerClassLocationsWithoutSharing) {
  for (const char* code : {"CORNER", "CENTER_SIZE", "CORNER_SIZE"}) {
    DetSpec s;
    s.num_classes = 3;
    s.share_location = false;
    s.nms_threshold = 0.3;
    s.code_type = code;
    s.has_confidence_threshold = true;
    s.confidence_threshold = 0.3;
    DetNet t(s, 2);
    fill(t.in("loc"), -0.5, 0.5, 21);
    fill(t.in("conf"), 0, 1, 22);
    std::vector<DetRow> rows = t.check(s);
    EXPECT_GT(rows.size(), 4u) << code;
  }
}

TEST(DetectionOutput, AdaptiveNmsAndNoBackground) {
  DetSpec s;
  s.num_classes = 2;
  s.background_label_id = -1;
  s.nms_threshold = 0.7;
  s.eta = 0.8;
  s.variance_encoded_in_target = true;
  s.code_type = "CENTER_SIZE";
  DetNet t(s, 1);
  fill(t.in("loc"), -0.1, 0.1, 31);
  fill(t.in("conf"), 0, 1, 32);
  t.check(s);
}

TEST(DetectionOutput, NothingDetectedGivesTheForksPlaceholderRows) {
  DetSpec s;
  s.num_classes = 3;
  s.keep_top_k = 5;
  s.has_confidence_threshold = true;
  s.confidence_threshold = 0.99;
  DetNet t(s, 2);
  fill(t.in("loc"), -1, 1, 41);
  fill(t.in("conf"), 0, 0.5, 42);
  t.check(s);
  const float* r = t.net->value("det").f32();
  EXPECT_EQ(r[0], 0.f);
  EXPECT_EQ(r[7], 1.f) << "second image's placeholder";
  EXPECT_EQ(r[8], -1.f);
  EXPECT_EQ(r[14], -1.f) << "padding";
}

TEST(DetectionOutput, BadInputNamesTheField) {
  const std::vector<Shape> in{{1, 64}, {1, 32}, {1, 2, 64}};
  EXPECT_NE(input_error_of([&] {
              OpHarness("type: 'DetectionOutput'", in, proto::TEST);
            }).find("detection_output_param.num_classes is required"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              OpHarness("type: 'DetectionOutput' detection_output_param { num_classes: 3 }", in, proto::TEST);
            }).find("16 priors x detection_output_param.num_classes 3 need 48"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              OpHarness("type: 'DetectionOutput' detection_output_param { num_classes: 2 nms_param { eta: 0 } }", in,
                        proto::TEST);
            }).find("nms_param.eta must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              OpHarness("type: 'DetectionOutput' detection_output_param { num_classes: 2 }",
                        {{1, 64}, {1, 32}, {1, 64}}, proto::TEST);
            }).find("the priors (bottom 2)"),
            std::string::npos);
}

TEST(DetectionOutput, SaveOutputParamIsReadAndIgnored) {
  OpHarness h(
      "type: 'DetectionOutput' detection_output_param { num_classes: 2 save_output_param { output_directory: "
      "'/nonexistent/out' output_format: 'VOC' label_map_file: 'labels.prototxt' } }",
      {{1, 64}, {1, 32}, {1, 2, 64}}, proto::TEST);
  EXPECT_FALSE(h.facts().has_backward);
}

// A two-scale SSD head as the fork's nets build it (Normalize, loc/conf convolutions,
// Permute, Flatten, Concat, softmax over classes, PriorBox per scale): the detections equal
// the direct computation over the net's own concatenated blobs, and those blobs hold what
// the heads computed in the order DetectionOutput reads (prior-major, then coordinates).
TEST(DetectionOutput, TwoScaleSsdHeadEndToEnd) {
  constexpr int C = 3, P = 4;  // classes; priors per cell (min, max, 2, 1/2)
  std::string text = R"(
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 32 dim: 32 } } }
layer { name: "f1" type: "Convolution" bottom: "data" top: "f1"
  convolution_param { num_output: 4 kernel_size: 3 stride: 8 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "f1_norm" type: "Normalize" bottom: "f1" top: "f1_norm"
  norm_param { across_spatial: false channel_shared: false scale_filler { type: "constant" value: 2 } } }
layer { name: "f2" type: "Pooling" bottom: "f1" top: "f2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
)";
  const char* sources[] = {"f1_norm", "f2"};
  const int min_size[] = {8, 16}, max_size[] = {16, 28};
  for (int k = 0; k < 2; ++k) {
    const std::string s = sources[k];
    for (auto [kind, n] : {std::pair<std::string, int>{"loc", P * 4}, {"conf", P * C}})
      text += fmt::format(R"(
layer {{ name: "{0}_{1}" type: "Convolution" bottom: "{0}" top: "{0}_{1}"
  convolution_param {{ num_output: {2} kernel_size: 3 pad: 1 weight_filler {{ type: "gaussian" std: 0.2 }} }} }}
layer {{ name: "{0}_{1}_perm" type: "Permute" bottom: "{0}_{1}" top: "{0}_{1}_perm" permute_param {{ order: 0 order: 2 order: 3 order: 1 }} }}
layer {{ name: "{0}_{1}_flat" type: "Flatten" bottom: "{0}_{1}_perm" top: "{0}_{1}_flat" }}
)",
                          s, kind, n);
    text += fmt::format(R"(
layer {{ name: "{0}_prior" type: "PriorBox" bottom: "{0}" bottom: "data" top: "{0}_prior"
  prior_box_param {{ min_size: {1} max_size: {2} aspect_ratio: 2 variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 }} }}
)",
                        s, min_size[k], max_size[k]);
  }
  text += fmt::format(R"(
layer {{ name: "mbox_loc" type: "Concat" bottom: "f1_norm_loc_flat" bottom: "f2_loc_flat" top: "mbox_loc" }}
layer {{ name: "mbox_conf" type: "Concat" bottom: "f1_norm_conf_flat" bottom: "f2_conf_flat" top: "mbox_conf" }}
layer {{ name: "mbox_prior" type: "Concat" bottom: "f1_norm_prior" bottom: "f2_prior" top: "mbox_prior" concat_param {{ axis: 2 }} }}
layer {{ name: "conf_reshape" type: "Reshape" bottom: "mbox_conf" top: "conf_reshape" reshape_param {{ shape {{ dim: 0 dim: -1 dim: {0} }} }} }}
layer {{ name: "conf_softmax" type: "Softmax" bottom: "conf_reshape" top: "conf_softmax" softmax_param {{ axis: 2 }} }}
layer {{ name: "conf_flat" type: "Flatten" bottom: "conf_softmax" top: "conf_flat" }}
layer {{ name: "det" bottom: "mbox_loc" bottom: "conf_flat" bottom: "mbox_prior" top: "det" {1} }}
)",
                      C, "{}");
  DetSpec d;
  d.num_classes = C;
  d.nms_threshold = 0.45;
  d.top_k = 10;
  d.keep_top_k = 12;
  d.has_confidence_threshold = true;
  d.confidence_threshold = 0.3;
  d.code_type = "CENTER_SIZE";
  text.replace(text.rfind("{}"), 2, detection_output_layer(d));

  CpuBackend backend(2);
  ParamStore store;
  NetLoad nl;
  nl.source = "ssd_head.prototxt";
  parse_prototxt_string(text, nl.source, nl.param, &nl.layer_lines);
  proto::NetState st;
  st.set_phase(proto::TEST);
  NetOptions opt;
  opt.reuse_buffers = false;  // the intermediate blobs are read after the pass
  Net net(build_caffe_graph(nl, st), proto::TEST, store, backend, 5, opt);
  fill(net.value("data"), -1, 1, 51);
  net.forward();

  // The concatenated blobs: per image, scale 1's 4 x 4 cells then scale 2's 2 x 2, each
  // cell's P priors, each prior's 4 offsets (or C scores), read from the heads' own outputs.
  const int64_t priors = (16 + 4) * P;
  const Tensor &loc = net.value("mbox_loc"), &conf = net.value("conf_flat"), &prior = net.value("mbox_prior");
  ASSERT_EQ(loc.shape(), (Shape{2, priors * 4}));
  ASSERT_EQ(prior.shape(), (Shape{1, 2, priors * 4}));
  for (int64_t n = 0; n < 2; ++n) {
    int64_t at = 0;
    for (const char* s : sources) {
      const Tensor& head = net.value(std::string(s) + "_loc");
      for (int64_t y = 0; y < head.dim(2); ++y)
        for (int64_t x = 0; x < head.dim(3); ++x)
          for (int64_t c = 0; c < P * 4; ++c, ++at) ASSERT_EQ(loc.f32()[n * priors * 4 + at], at4(head, n, c, y, x));
    }
  }
  PriorSpec ps = small_priors();
  int64_t at = 0;
  for (int k = 0; k < 2; ++k) {
    ps.min_size = {static_cast<double>(min_size[k])};
    ps.max_size = {static_cast<double>(max_size[k])};
    const int64_t side = k == 0 ? 4 : 2;
    Tensor want = naive_prior_box(ps, side, side, 32, 32);
    const int64_t m = want.dim(2);
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_NEAR(prior.f32()[at + i], want.f32()[i], 1e-6) << "box " << k << ", " << i;
      EXPECT_NEAR(prior.f32()[priors * 4 + at + i], want.f32()[m + i], 1e-6) << "variance " << k << ", " << i;
    }
    at += m;
  }
  std::vector<DetRow> rows = naive_detections(loc, conf, prior, d);
  EXPECT_GT(rows.size(), 4u);
  expect_close(net.value("det"), padded_detections(rows, net.value("det").dim(2)), 1e-5f, "detections");
}

// SSD training files are refused in one line that says why.
TEST(SsdTraining, ForkTrainingFieldsAreNamedAsUnsupported) {
  for (const char* text : {"layer { name: 'd' type: 'AnnotatedData' annotated_data_param { label_map_file: 'x' } }",
                           "layer { name: 'd' type: 'Data' transform_param { resize_param { height: 300 } } }",
                           "layer { name: 'l' type: 'MultiBoxLoss' multibox_loss_param { num_classes: 21 } }"}) {
    proto::NetParameter net;
    const std::string e = input_error_of([&] { parse_prototxt_string(text, "train.prototxt", net); });
    EXPECT_NE(e.find("train.prototxt:1:"), std::string::npos) << e;
    EXPECT_NE(e.find("AnnotatedData, MultiBoxLoss and DetectionEvaluate are not supported"), std::string::npos) << e;
  }
  proto::NetParameter net;
  EXPECT_EQ(input_error_of([&] { parse_prototxt_string("layer { bogus: 1 }", "n.prototxt", net); }).find("SSD"),
            std::string::npos);
}

}  // namespace
}  // namespace bks::test
