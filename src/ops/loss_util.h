// Caffe's loss normalisation (LossParameter.normalization, and the deprecated `normalize`)
// and ignore_label.
#pragma once

#include <algorithm>

#include "caffe.pb.h"

namespace bks {

inline proto::LossParameter::NormalizationMode loss_mode(const proto::LayerParameter& lp,
                                                         proto::LossParameter::NormalizationMode dflt) {
  const auto& p = lp.loss_param();
  if (p.has_normalization()) return p.normalization();
  if (p.has_normalize()) return p.normalize() ? proto::LossParameter::VALID : proto::LossParameter::BATCH_SIZE;
  return dflt;
}

inline float loss_normalizer(proto::LossParameter::NormalizationMode m, int64_t outer, int64_t inner, int64_t valid) {
  double n = 1;
  switch (m) {
    case proto::LossParameter::FULL: n = static_cast<double>(outer * inner); break;
    case proto::LossParameter::VALID: n = static_cast<double>(valid); break;
    case proto::LossParameter::BATCH_SIZE: n = static_cast<double>(outer); break;
    case proto::LossParameter::NONE: n = 1; break;
  }
  return static_cast<float>(std::max(n, 1.0));
}

// loss_param.ignore_label: items whose label is `label` take no loss and no gradient.
struct IgnoreLabel {
  bool on = false;
  int label = -1;
  static IgnoreLabel from(const proto::LayerParameter& lp) {
    const auto& p = lp.loss_param();
    return p.has_ignore_label() ? IgnoreLabel{true, p.ignore_label()} : IgnoreLabel{};
  }
  bool skips(int l) const { return on && l == label; }
  // A label held as float: converted only when there is an ignore_label.
  bool skips(float l) const { return on && static_cast<int>(l) == label; }
};

}  // namespace bks
