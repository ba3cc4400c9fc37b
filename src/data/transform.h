// Caffe's transform_param applied while a batch is assembled: optional crop (random in
// TRAIN, centre in TEST), optional mirror (random, TRAIN only), then (x - mean) * scale.
#pragma once

#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace bks {

// What a transform does (the fields of Caffe's TransformationParameter, with its defaults).
struct TransformOptions {
  float scale = 1.f;
  bool mirror = false;
  int64_t crop_size = 0;          // 0: no crop
  std::string mean_file;          // a BlobProto of (C, H, W) means; empty: none
  std::vector<float> mean_value;  // one per channel, or one for all
};

class Transform {
 public:
  // `sample_shape` is (C, H, W) of the stored samples. Reads mean_file now.
  Transform(const TransformOptions& o, const Shape& sample_shape, bool train, const std::string& where);
  // Shape of one transformed sample.
  Shape output_shape() const { return {c_, oh_, ow_}; }
  // Transforms one sample (uint8 or float source) into `dst`. `rng` decides crop and mirror.
  // `rng` may be null when needs_rng() is false.
  void apply_u8(const uint8_t* src, float* dst, Rng* rng) const;
  void apply_f32(const float* src, float* dst, Rng* rng) const;
  bool needs_rng() const { return mirror_ || (train_ && (oh_ != h_ || ow_ != w_)); }

 private:
  template <class T>
  void apply(const T* src, float* dst, Rng* rng) const;
  int64_t c_, h_, w_, oh_, ow_;
  float scale_;
  bool mirror_, train_;
  std::vector<float> mean_;  // per channel (size c) or full image (size c*h*w), or empty
  bool mean_per_pixel_ = false;
};

}  // namespace bks
