// Softmax, SoftmaxWithLoss (normalisation, ignore_label, SegNet's class weights), Accuracy
// (top-k), EuclideanLoss, SigmoidCrossEntropyLoss, ContrastiveLoss, InfogainLoss,
// MultinomialLogisticLoss and HingeLoss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "formats/caffe_net.h"
#include "op_harness.h"

namespace bks::test {
namespace {

void set_labels(Tensor& t, std::initializer_list<float> v) { std::copy(v.begin(), v.end(), t.f32()); }

TEST(Softmax, RowsSumToOneAndGradient) {
  OpHarness h("type: 'Softmax'", {{3, 4, 2}});
  h.forward();
  for (int n = 0; n < 3; ++n)
    for (int i = 0; i < 2; ++i) {
      double s = 0;
      for (int c = 0; c < 4; ++c) s += h.out[0].f32()[(n * 4 + c) * 2 + i];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  h.check_gradients();
}

TEST(SoftmaxWithLoss, ValueMatchesCrossEntropy) {
  OpHarness h("type: 'SoftmaxWithLoss'", {{3, 4}, {3}});
  set_labels(h.in[1], {0, 3, 1});
  h.forward();
  double loss = 0;
  int labels[] = {0, 3, 1};
  for (int n = 0; n < 3; ++n) {
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(h.in[0].f32()[n * 4 + c]);
    loss -= std::log(std::exp(h.in[0].f32()[n * 4 + labels[n]]) / z);
  }
  EXPECT_NEAR(h.out[0].f32()[0], loss / 3, 1e-5);
  h.out_grad[0].f32()[0] = 1.f;
  h.check_gradients(1e-3f, 1e-2f, {0});
}

TEST(SoftmaxWithLoss, IgnoreLabelAndNormalization) {
  OpHarness valid("type: 'SoftmaxWithLoss' loss_param { ignore_label: 2 }", {{4, 3}, {4}});
  set_labels(valid.in[1], {0, 2, 1, 2});
  valid.forward();
  OpHarness none("type: 'SoftmaxWithLoss' loss_param { ignore_label: 2 normalization: NONE }", {{4, 3}, {4}});
  none.in[0].copy_from(valid.in[0]);
  set_labels(none.in[1], {0, 2, 1, 2});
  none.forward();
  EXPECT_NEAR(none.out[0].f32()[0], valid.out[0].f32()[0] * 2, 1e-5);  // 2 valid items
  valid.check_gradients(1e-3f, 1e-2f, {0});
  EXPECT_EQ(valid.in_grad[0].f32()[3], 0.f) << "ignored items get no gradient";
}

TEST(SoftmaxWithLoss, SpatialAxisAndBadLabel) {
  OpHarness h("type: 'SoftmaxWithLoss'", {{2, 3, 2, 2}, {2, 1, 2, 2}});
  set_labels(h.in[1], {0, 1, 2, 0, 2, 2, 1, 0});
  h.check_gradients(1e-3f, 1e-2f, {0});
  set_labels(h.in[1], {0, 1, 7, 0, 2, 2, 1, 0});
  EXPECT_THROW(h.forward(), RuntimeError);
  EXPECT_THROW(OpHarness("type: 'SoftmaxWithLoss'", {{2, 3}, {3}}), InputError);
}

TEST(Accuracy, TopOneTopKAndPerClass) {
  OpHarness h("type: 'Accuracy'", {{4, 3}, {4}}, proto::TEST, 2);
  float x[] = {0.9f, 0.1f, 0.0f, 0.2f, 0.3f, 0.5f, 0.4f, 0.4f, 0.2f, 0.1f, 0.8f, 0.1f};
  std::copy(x, x + 12, h.in[0].f32());
  set_labels(h.in[1], {0, 1, 0, 1});
  h.forward();
  // item0 correct; item1 wrong (2 wins); item2 tie with class 1 counts against; item3 correct.
  EXPECT_FLOAT_EQ(h.out[0].f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(h.out[1].f32()[0], 0.5f);
  EXPECT_FLOAT_EQ(h.out[1].f32()[1], 0.5f);
  OpHarness k("type: 'Accuracy' accuracy_param { top_k: 2 }", {{4, 3}, {4}}, proto::TEST);
  std::copy(x, x + 12, k.in[0].f32());
  set_labels(k.in[1], {0, 1, 0, 1});
  k.forward();
  EXPECT_FLOAT_EQ(k.out[0].f32()[0], 1.0f);
}

TEST(EuclideanLoss, ValueAndBothGradients) {
  OpHarness h("type: 'EuclideanLoss'", {{3, 4}, {3, 4}});
  h.forward();
  double s = 0;
  for (int i = 0; i < 12; ++i) s += std::pow(h.in[0].f32()[i] - h.in[1].f32()[i], 2);
  EXPECT_NEAR(h.out[0].f32()[0], s / 6, 1e-5);
  h.check_gradients();
}

TEST(SigmoidCrossEntropyLoss, ValueAndGradient) {
  OpHarness h("type: 'SigmoidCrossEntropyLoss'", {{2, 3}, {2, 3}});
  set_labels(h.in[1], {1, 0, 1, 0, 0, 1});
  h.forward();
  double s = 0;
  for (int i = 0; i < 6; ++i) {
    double p = 1 / (1 + std::exp(-h.in[0].f32()[i])), t = h.in[1].f32()[i];
    s -= t * std::log(p) + (1 - t) * std::log(1 - p);
  }
  EXPECT_NEAR(h.out[0].f32()[0], s / 2, 1e-5);
  h.check_gradients(1e-3f, 1e-2f, {0});
}

// The InputError building the layer gives, which must name `field`.
void expect_error_naming(const std::string& layer, const std::vector<Shape>& in, const std::string& field) {
  try {
    OpHarness h(layer, in);
    ADD_FAILURE() << layer << " was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

// SegNet's class weighting: each pixel's loss and gradient times its class's weight, divided
// by the count of pixels not ignored (the fork's `normalize`, VALID). Zero scores make every
// probability 1/3, so the loss is sum(w_label) ln 3 / valid and dx = (1/3 - [k == label]) w / valid.
TEST(SoftmaxWithLoss, SegNetClassWeightingByHand) {
  const std::string layer =
      "type: 'SoftmaxWithLoss' loss_param { weight_by_label_freqs: true ignore_label: 255 class_weighting: 0.5 "
      "class_weighting: 2 class_weighting: 3 ";
  OpHarness h(layer + "}", {{1, 3, 1, 5}, {1, 1, 1, 5}});
  h.in[0].zero();
  set_labels(h.in[1], {0, 2, 255, 1, 0});
  h.forward();
  const double ln3 = std::log(3.0), w[] = {0.5, 2, 3};
  EXPECT_NEAR(h.out[0].f32()[0], (0.5 + 3 + 2 + 0.5) * ln3 / 4, 1e-6);
  h.out_grad[0].f32()[0] = 1.f;
  h.backward();
  const int labels[] = {0, 2, -1, 1, 0};
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 5; ++i) {
      double want = labels[i] < 0 ? 0.0 : (1.0 / 3 - (k == labels[i])) * w[labels[i]] / 4;
      EXPECT_NEAR(h.in_grad[0].f32()[k * 5 + i], want, 1e-6) << "class " << k << " pixel " << i;
    }
  // normalize: false divides by the batch (1 image) instead of the 4 valid pixels.
  OpHarness batch(layer + "normalize: false }", {{1, 3, 1, 5}, {1, 1, 1, 5}});
  batch.in[0].zero();
  set_labels(batch.in[1], {0, 2, 255, 1, 0});
  batch.forward();
  EXPECT_NEAR(batch.out[0].f32()[0], 6 * ln3, 1e-5);
  // Random scores: the gradient by finite differences.
  OpHarness fd(layer + "}", {{2, 3, 2, 2}, {2, 1, 2, 2}});
  set_labels(fd.in[1], {0, 1, 2, 255, 2, 2, 1, 0});
  fd.check_gradients(1e-3f, 1e-2f, {0});
  // One weight per class, and weights only with weight_by_label_freqs.
  expect_error_naming(layer + "class_weighting: 1 }", {{1, 3, 1, 5}, {1, 1, 1, 5}}, "class_weighting has 4 values");
  expect_error_naming("type: 'SoftmaxWithLoss' loss_param { weight_by_label_freqs: true }", {{1, 3}, {1}},
                      "class_weighting");
}

// Caffe's contrastive loss in double: similar pairs d^2, dissimilar max(m - d, 0)^2 (legacy:
// max(m - d^2, 0)), over 2N.
double contrastive(const OpHarness& h, double margin, bool legacy) {
  int64_t n = h.in[0].dim(0), c = h.in[0].numel() / n;
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sq = 0;
    for (int64_t k = 0; k < c; ++k) sq += std::pow(double{h.in[0].f32()[i * c + k]} - h.in[1].f32()[i * c + k], 2);
    if (static_cast<int>(h.in[2].f32()[i]) != 0)
      loss += sq;
    else
      loss += legacy ? std::max(margin - sq, 0.0) : std::pow(std::max(margin - std::sqrt(sq), 0.0), 2);
  }
  return loss / static_cast<double>(n) / 2;
}

TEST(ContrastiveLoss, BothVersionsValueAndGradients) {
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "legacy" : "Hadsell");
    std::string layer = std::string("type: 'ContrastiveLoss' contrastive_loss_param { margin: 1.5 legacy_version: ") +
                        (legacy ? "true" : "false") + " }";
    OpHarness h(layer, {{5, 3, 1, 1}, {5, 3, 1, 1}, {5, 1, 1, 1}});
    // Pair 1 is dissimilar and farther apart than the margin: no loss, no gradient.
    for (int k = 0; k < 3; ++k) h.in[1].f32()[3 + k] = h.in[0].f32()[3 + k] + 1.5f;
    set_labels(h.in[2], {1, 0, 0, 1, 0.5f});  // 0.5 truncates to 0: dissimilar, as in Caffe
    h.forward();
    EXPECT_NEAR(h.out[0].f32()[0], contrastive(h, 1.5, legacy), 1e-5);
    h.check_gradients(1e-3f, 1e-2f, {0, 1});
    for (int k = 0; k < 3; ++k) EXPECT_EQ(h.in_grad[0].f32()[3 + k], 0.f) << "beyond the margin";
  }
}

TEST(ContrastiveLoss, BadShapesAndMargin) {
  expect_error_naming("type: 'ContrastiveLoss'", {{4, 3}, {4, 2}, {4}}, "bottoms 0 and 1");
  expect_error_naming("type: 'ContrastiveLoss'", {{4, 3}, {4, 3}, {3}}, "bottom 2");
  expect_error_naming("type: 'ContrastiveLoss'", {{4, 3, 2, 1}, {4, 3, 2, 1}, {4}}, "bottoms 0 and 1");
  expect_error_naming("type: 'ContrastiveLoss' contrastive_loss_param { margin: inf }", {{4, 3}, {4, 3}, {4}},
                      "contrastive_loss_param.margin");
}

// -sum over items of sum_l H[y][l] log softmax(x)_l, over the valid items (VALID).
double infogain(const Tensor& x, const Tensor& label, const std::vector<double>& hm, int ignore = -100) {
  int64_t outer = x.dim(0), k = x.dim(1), inner = x.numel() / (outer * k);
  double loss = 0;
  int64_t valid = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto y = static_cast<int64_t>(label.f32()[o * inner + i]);
      if (y == ignore) continue;
      double z = 0;
      for (int64_t l = 0; l < k; ++l) z += std::exp(double{x.f32()[(o * k + l) * inner + i]});
      for (int64_t l = 0; l < k; ++l)
        loss -= hm[y * k + l] * std::log(std::exp(double{x.f32()[(o * k + l) * inner + i]}) / z);
      ++valid;
    }
  return loss / static_cast<double>(std::max<int64_t>(valid, 1));
}

std::vector<double> fill_h(Tensor& t) {
  std::vector<double> hm;
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.f32()[i] = static_cast<float>((i * 7) % 5) * 0.25f + (i % 5 == 0 ? 1.f : 0.f);
    hm.push_back(t.f32()[i]);
  }
  return hm;
}

TEST(InfogainLoss, MatrixAsThirdBottom) {
  OpHarness h("type: 'InfogainLoss'", {{3, 4}, {3}, {4, 4}}, proto::TRAIN, 2);
  std::vector<double> hm = fill_h(h.in[2]);
  set_labels(h.in[1], {2, 0, 3});
  h.forward();
  EXPECT_NEAR(h.out[0].f32()[0], infogain(h.in[0], h.in[1], hm), 1e-5);
  for (int n = 0; n < 3; ++n) {  // the second top is the softmax
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(double{h.in[0].f32()[n * 4 + c]});
    EXPECT_NEAR(h.out[1].f32()[n * 4 + 1], std::exp(double{h.in[0].f32()[n * 4 + 1]}) / z, 1e-6);
  }
  h.out_grad[1].zero();  // as in Caffe, only the loss top sends a gradient back
  h.check_gradients(1e-3f, 1e-2f, {0});
}

TEST(InfogainLoss, SpatialAxisAndIgnoreLabel) {
  OpHarness h("type: 'InfogainLoss' loss_param { ignore_label: 1 }", {{2, 3, 2, 2}, {2, 1, 2, 2}, {3, 3}});
  std::vector<double> hm = fill_h(h.in[2]);
  set_labels(h.in[1], {0, 1, 2, 2, 1, 0, 1, 2});
  h.forward();
  EXPECT_NEAR(h.out[0].f32()[0], infogain(h.in[0], h.in[1], hm, 1), 1e-5);
  h.check_gradients(1e-3f, 1e-2f, {0});
  EXPECT_EQ(h.in_grad[0].f32()[1], 0.f) << "an ignored item takes no gradient";
}

// H written as Caffe writes a .binaryproto (legacy 4-d shape fields).
std::string write_h(const std::string& name, int rows, int cols) {
  proto::BlobProto b;
  b.set_num(1), b.set_channels(1), b.set_height(rows), b.set_width(cols);
  for (int i = 0; i < rows * cols; ++i) b.add_data(static_cast<float>((i * 7) % 5) * 0.25f + (i % 5 == 0 ? 1.f : 0.f));
  std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << b.SerializeAsString();
  return path;
}

TEST(InfogainLoss, MatrixFromSourceFile) {
  std::string path = write_h("bks_infogain_4x4.binaryproto", 4, 4);
  OpHarness h("type: 'InfogainLoss' infogain_loss_param { source: '" + path + "' }", {{3, 4}, {3}});
  OpHarness ref("type: 'InfogainLoss'", {{3, 4}, {3}, {4, 4}});
  std::vector<double> hm = fill_h(ref.in[2]);
  set_labels(h.in[1], {1, 3, 0});
  h.forward();
  EXPECT_NEAR(h.out[0].f32()[0], infogain(h.in[0], h.in[1], hm), 1e-5);
  h.check_gradients(1e-3f, 1e-2f, {0});
}

// A relative source is looked up beside the prototxt, as data sources are.
TEST(InfogainLoss, RelativeSourceBesideThePrototxt) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "bks_infogain_net";
  std::filesystem::create_directories(dir);
  std::filesystem::rename(write_h("bks_infogain_rel.binaryproto", 4, 4), dir / "H.binaryproto");
  std::ofstream(dir / "net.prototxt") << "layer { name: 'l' type: 'InfogainLoss' bottom: 'x' bottom: 'y' top: 'loss' "
                                         "infogain_loss_param { source: 'H.binaryproto' } }\n";
  NetLoad nl = load_net_file((dir / "net.prototxt").string());
  EXPECT_EQ(nl.param.layer(0).infogain_loss_param().source(), (dir / "H.binaryproto").string());
}

TEST(InfogainLoss, BadSourceAndShapes) {
  expect_error_naming("type: 'InfogainLoss'", {{3, 4}, {3}}, "infogain_loss_param.source");
  std::string small = write_h("bks_infogain_3x3.binaryproto", 3, 3);
  expect_error_naming("type: 'InfogainLoss' infogain_loss_param { source: '" + small + "' }", {{3, 4}, {3}},
                      "needs 4x4");
  expect_error_naming("type: 'InfogainLoss' infogain_loss_param { source: '/nonexistent/h.binaryproto' }",
                      {{3, 4}, {3}}, "infogain_loss_param.source");
  // A file far larger than any 4x4 matrix is refused before it is read.
  std::string big = (std::filesystem::temp_directory_path() / "bks_infogain_big.binaryproto").string();
  std::ofstream(big, std::ios::binary) << std::string(1 << 20, 'x');
  expect_error_naming("type: 'InfogainLoss' infogain_loss_param { source: '" + big + "' }", {{3, 4}, {3}}, "too large");
  expect_error_naming("type: 'InfogainLoss'", {{3, 4}, {3}, {3, 3}}, "bottom 2");
  expect_error_naming("type: 'InfogainLoss'", {{3, 4}, {2}, {4, 4}}, "label count");
  expect_error_naming("type: 'InfogainLoss' loss_param { normalize: true }", {{3, 4}, {3}, {4, 4}},
                      "loss_param.normalize");
}

TEST(MultinomialLogisticLoss, ValueAndGradient) {
  OpHarness h("type: 'MultinomialLogisticLoss'", {{4, 3, 1, 1}, {4, 1, 1, 1}});
  h.randomize_inputs(0.1f, 1.f);
  set_labels(h.in[1], {2, 0, 1, 2});
  h.forward();
  double s = 0;
  int labels[] = {2, 0, 1, 2};
  for (int n = 0; n < 4; ++n) s -= std::log(double{h.in[0].f32()[n * 3 + labels[n]]});
  EXPECT_NEAR(h.out[0].f32()[0], s / 4, 1e-5);
  h.check_gradients(1e-4f, 1e-2f, {0});
  EXPECT_EQ(h.in_grad[0].f32()[0], 0.f) << "only the labelled probability takes gradient";
  set_labels(h.in[1], {2, 0, 3, 2});
  EXPECT_THROW(h.forward(), RuntimeError);
  expect_error_naming("type: 'MultinomialLogisticLoss'", {{4, 3}, {4, 3}}, "bottom 1");
}

// With t = -1 at the label, +1 elsewhere: sum of max(0, 1 + t x) (or its square) over N.
double hinge(const OpHarness& h, bool l2) {
  int64_t n = h.in[0].dim(0), dim = h.in[0].numel() / n;
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      double t = j == static_cast<int64_t>(h.in[1].f32()[i]) ? -1 : 1;
      double m = std::max(0.0, 1 + t * h.in[0].f32()[i * dim + j]);
      s += l2 ? m * m : m;
    }
  return s / static_cast<double>(n);
}

TEST(HingeLoss, L1AndL2ValueAndGradient) {
  for (bool l2 : {false, true}) {
    SCOPED_TRACE(l2 ? "L2" : "L1");
    OpHarness h(std::string("type: 'HingeLoss' hinge_loss_param { norm: ") + (l2 ? "L2" : "L1") + " }", {{4, 5}, {4}});
    h.randomize_inputs(-2.f, 2.f);
    for (int64_t i = 0; i < 20; ++i)  // away from the kinks at x = +-1
      if (std::fabs(std::fabs(h.in[0].f32()[i]) - 1.f) < 0.05f) h.in[0].f32()[i] *= 1.2f;
    set_labels(h.in[1], {4, 0, 2, 4});
    h.forward();
    EXPECT_NEAR(h.out[0].f32()[0], hinge(h, l2), 1e-5);
    h.check_gradients(1e-3f, 1e-2f, {0});
  }
  expect_error_naming("type: 'HingeLoss'", {{4, 5}, {5}}, "bottom 1");
}

}  // namespace
}  // namespace bks::test

namespace bks {
namespace {

// At deploy InfogainLoss becomes a Softmax over the same axis (it was axis 1 whatever the
// loss's axis).
TEST(InfogainLoss, InferenceFormKeepsTheAxis) {
  proto::LayerParameter l;
  l.set_name("loss");
  l.set_type("InfogainLoss");
  l.mutable_infogain_loss_param()->set_axis(2);
  Graph g;
  g.nodes.push_back(caffe_layer_node(l, "net.prototxt:1"));
  OpDefRegistry::get().find("InfogainLoss")->to_inference_form(g.nodes[0]);
  ASSERT_EQ(g.nodes[0].type, "Softmax");
  EXPECT_EQ(caffe_layer(g, 0).softmax_param().axis(), 2);
}

}  // namespace
}  // namespace bks
