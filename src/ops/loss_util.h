// Caffe's loss normalisation and ignore_label, as the typed attributes of the losses that
// use them (LossParameter.normalization and the deprecated `normalize` resolve at the
// front end).
#pragma once

#include <algorithm>

#include "graph/attrs.h"

namespace bks {

// The loss_param part of a loss's attributes.
struct LossSpec final : AttrStruct {
  enum Normalization { full, valid, batch_size, none };  // Caffe's NormalizationMode order
  static constexpr const char* kNormalizations[] = {"FULL", "VALID", "BATCH_SIZE", "NONE"};
  int normalization = valid;  // the owner sets its type's default
  bool ignore = false;        // items labelled ignore_label take no loss and no gradient
  int64_t ignore_label = 0;
  void visit(AttrVisitor& v) override {
    v.field("normalization", normalization, kNormalizations);
    v.field("ignore", ignore);
    v.field("ignore_label", ignore_label);
  }
};

// Reads loss_param; `dflt` is the type's normalization when neither normalization nor the
// deprecated normalize is given (Caffe's differ per loss).
inline LossSpec loss_from_caffe(const proto::LayerParameter& l, LossSpec::Normalization dflt) {
  const proto::LossParameter& p = l.loss_param();
  LossSpec s;
  s.normalization = dflt;
  if (p.has_normalization())
    s.normalization = static_cast<int>(p.normalization());
  else if (p.has_normalize())
    s.normalization = p.normalize() ? LossSpec::valid : LossSpec::batch_size;
  if (p.has_ignore_label()) {
    s.ignore = true;
    s.ignore_label = p.ignore_label();
  }
  return s;
}
inline void loss_to_caffe(const LossSpec& s, proto::LayerParameter& l) {
  proto::LossParameter* p = l.mutable_loss_param();
  p->clear_normalize();
  p->set_normalization(static_cast<proto::LossParameter::NormalizationMode>(s.normalization));
  p->clear_ignore_label();
  if (s.ignore) p->set_ignore_label(static_cast<int32_t>(s.ignore_label));
}

inline float loss_normalizer(int normalization, int64_t outer, int64_t inner, int64_t valid) {
  double n = 1;
  switch (normalization) {
    case LossSpec::full: n = static_cast<double>(outer * inner); break;
    case LossSpec::valid: n = static_cast<double>(valid); break;
    case LossSpec::batch_size: n = static_cast<double>(outer); break;
    case LossSpec::none: n = 1; break;
  }
  return static_cast<float>(std::max(n, 1.0));
}

// ignore_label as the loops test it.
struct IgnoreLabel {
  bool on = false;
  int label = -1;
  static IgnoreLabel from(const LossSpec& s) {
    return s.ignore ? IgnoreLabel{true, static_cast<int>(s.ignore_label)} : IgnoreLabel{};
  }
  bool skips(int l) const { return on && l == label; }
  // A label held as float: converted only when there is an ignore_label.
  bool skips(float l) const { return on && static_cast<int>(l) == label; }
};

}  // namespace bks
