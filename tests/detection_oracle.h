// The SSD fork's PriorBox and DetectionOutput as the tests write them down: layer text and
// a direct computation in double, shared by tests/test_ops_detection.cc and the sweep.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace bks::test {

// The fields of prior_box_param the tests use (0 for img_h / step_h: not given).
struct PriorSpec {
  std::vector<double> min_size, max_size, aspect_ratio, variance;
  bool flip = true, clip = false;
  int64_t img_h = 0, img_w = 0;
  double step_h = 0, step_w = 0, offset = 0.5;
};
std::string prior_box_layer(const PriorSpec& s);
// [1, 2, fh * fw * priors * 4] for a feature map fh x fw over an image img_h x img_w
// (the spec's own sizes win when given). Sizes are truncated to integers, as the fork does.
Tensor naive_prior_box(const PriorSpec& s, int64_t fh, int64_t fw, int64_t img_h, int64_t img_w);

struct DetSpec {
  int64_t num_classes = 2;
  bool share_location = true;
  int64_t background_label_id = 0;
  double nms_threshold = 0.3;
  int64_t top_k = -1, keep_top_k = -1;
  double eta = 1;
  bool has_confidence_threshold = false;
  double confidence_threshold = 0;
  std::string code_type = "CORNER";
  bool variance_encoded_in_target = false;
};
std::string detection_output_layer(const DetSpec& s);

using DetRow = std::array<double, 7>;  // image_id, label, score, xmin, ymin, xmax, ymax
// The rows the fork's layer writes: decode each prediction against its prior, per image
// and non-background class keep the scores above the threshold, the top_k best, drop any
// box whose IoU with a kept box of the same class exceeds the (adaptive) threshold, then
// the keep_top_k best of the image; rows by image, label, score. No row at all: one
// (i, -1, -1, -1, -1, -1, -1) per image.
std::vector<DetRow> naive_detections(const Tensor& loc, const Tensor& conf, const Tensor& prior, const DetSpec& s);
// Those rows as bakusoku's static top [1, 1, rows, 7], padded with rows of -1.
Tensor padded_detections(const std::vector<DetRow>& rows, int64_t total);

}  // namespace bks::test
