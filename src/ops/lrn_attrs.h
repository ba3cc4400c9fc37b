// Attributes of LRN (Caffe's lrn_param).
#pragma once

#include "graph/attrs.h"

namespace bks {

struct LRNAttrs final : AttrsOf<LRNAttrs> {
  enum Region { across_channels, within_channel };
  int64_t local_size = 5;
  float alpha = 1.f, beta = 0.75f, k = 1.f;
  int region = across_channels;
  void visit(AttrVisitor& v) override;
};

}  // namespace bks
