// A node's fused ReLU (deploy.fusion) as a oneDNN post-op, and on one value for kernels that
// write their outputs themselves.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/graph.h"

namespace bks {

// A leaky ReLU, or a bounded one (ReLU6, Clip from 0) as a clip; nothing when f has none.
inline void append_fused_relu(dnnl::post_ops& po, const FusedPostOps& f) {
  if (!f.relu) return;
  if (f.bounded())
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f, f.relu_max);
  else
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, f.relu_slope, 0.f);
}

// y after the fused ReLU (leaky, and bounded where f says so); y itself when f has none.
inline float apply_fused_relu(float y, const FusedPostOps& f) {
  if (!f.relu) return y;
  if (y < 0.f) y *= f.relu_slope;
  return f.bounded() && y > f.relu_max ? f.relu_max : y;
}

}  // namespace bks
