#include "data/transform.h"

#include "caffe.pb.h"
#include "core/file_io.h"

namespace bks {

Transform::Transform(const TransformOptions& o, const Shape& s, bool train, const std::string& where) : train_(train) {
  if (s.size() != 3) input_error("{}: transform_param needs (C,H,W) samples, got {}", where, shape_str(s));
  c_ = s[0];
  h_ = s[1];
  w_ = s[2];
  scale_ = o.scale;
  mirror_ = o.mirror;
  int64_t crop = o.crop_size;
  if (crop > 0 && (crop > h_ || crop > w_))
    input_error("{}: transform_param.crop_size {} exceeds the {}x{} samples", where, crop, h_, w_);
  oh_ = crop > 0 ? crop : h_;
  ow_ = crop > 0 ? crop : w_;
  if (!o.mean_file.empty() && !o.mean_value.empty())
    input_error("{}: transform_param takes mean_file or mean_value, not both", where);
  int64_t means = static_cast<int64_t>(o.mean_value.size());
  if (!o.mean_file.empty()) {
    proto::BlobProto blob;
    read_binary_proto(o.mean_file, blob);
    int64_t n = blob.data_size();
    if (n != c_ * h_ * w_)
      input_error("{}: mean_file {} holds {} values but samples have {} ({}x{}x{})", where, o.mean_file, n,
                  c_ * h_ * w_, c_, h_, w_);
    mean_.assign(blob.data().begin(), blob.data().end());
    mean_per_pixel_ = true;
  } else if (means > 0) {
    if (means != 1 && means != c_)
      input_error("{}: {} mean_value entries for {} channels (give 1 or {})", where, means, c_, c_);
    for (int64_t k = 0; k < c_; ++k) mean_.push_back(o.mean_value[means == 1 ? 0 : k]);
  }
}

template <class T>
void Transform::apply(const T* src, float* dst, Rng* rng) const {
  int64_t y0 = 0, x0 = 0;
  if (oh_ != h_ || ow_ != w_) {
    if (train_) {
      y0 = static_cast<int64_t>(rng->below(static_cast<uint64_t>(h_ - oh_ + 1)));
      x0 = static_cast<int64_t>(rng->below(static_cast<uint64_t>(w_ - ow_ + 1)));
    } else {
      y0 = (h_ - oh_) / 2;
      x0 = (w_ - ow_) / 2;
    }
  }
  // As in Caffe, mirror applies in both phases when asked for.
  bool flip = mirror_ && (rng->next_u32() & 1u);
  for (int64_t k = 0; k < c_; ++k)
    for (int64_t y = 0; y < oh_; ++y) {
      const T* row = src + (k * h_ + y + y0) * w_ + x0;
      float* out = dst + (k * oh_ + y) * ow_;
      const float* mrow = mean_per_pixel_ ? mean_.data() + (k * h_ + y + y0) * w_ + x0 : nullptr;
      float mc = (!mean_per_pixel_ && !mean_.empty()) ? mean_[k] : 0.f;
      for (int64_t x = 0; x < ow_; ++x) {
        int64_t sx = flip ? ow_ - 1 - x : x;
        float m = mrow ? mrow[sx] : mc;
        out[x] = (static_cast<float>(row[sx]) - m) * scale_;
      }
    }
}

void Transform::apply_u8(const uint8_t* src, float* dst, Rng* rng) const { apply(src, dst, rng); }
void Transform::apply_f32(const float* src, float* dst, Rng* rng) const { apply(src, dst, rng); }

}  // namespace bks
