// Attributes of Pooling (Caffe's pooling_param).
#pragma once

#include <string>
#include <vector>

#include "graph/attrs.h"

namespace bks {

struct PoolingAttrs final : AttrsOf<PoolingAttrs> {
  enum Method { max, ave, stochastic };
  int method = max;
  bool global = false;          // the window is the whole plane
  std::vector<int64_t> kernel;  // (height, width); empty for global pooling
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> pad{0, 0};
  bool ceil = true;  // output size rounds up (Caffe's default) or down
  void visit(AttrVisitor& v) override;
};

struct OpContext;

// A node's pooling window, resolved and checked (errors name the field). kh/kw are 0 for
// global pooling: the window is then the input's plane.
struct PoolWindow {
  bool global = false, max = true, ceil = true;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0;
};
PoolWindow pool_window(const OpContext& c);

}  // namespace bks
