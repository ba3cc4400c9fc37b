// Resize, nearest, by whole factors of H and W: a depthwise Deconvolution whose kernel is
// the factor and whose weights are ones copies each pixel into its block exactly. Accepted
// only where the node's coordinate mode and rounding map every output pixel of a block to
// that block's input pixel (checked numerically below, so no mode is taken on faith).
#include <cmath>

#include "formats/onnx_ops.h"

namespace bks::onnx_import {
namespace {

// The input index ONNX reads for output index `i` at factor `s` (clamped below at 0).
int64_t source_index(const NodeCtx& c, const std::string& ctm, const std::string& nm, int64_t i, int64_t s,
                     int64_t out) {
  const double si = static_cast<double>(i), sc = static_cast<double>(s);
  double x;
  if (ctm == "asymmetric") x = si / sc;
  else if (ctm == "half_pixel") x = (si + 0.5) / sc - 0.5;
  else if (ctm == "pytorch_half_pixel") x = out > 1 ? (si + 0.5) / sc - 0.5 : 0;
  else input_error("{}: coordinate_transformation_mode '{}' is not supported", c.where(), ctm);
  const double fl = std::floor(x), frac = x - fl;
  double r;
  if (nm == "floor") r = fl;
  else if (nm == "ceil") r = std::ceil(x);
  else if (nm == "round_prefer_floor") r = frac == 0.5 ? fl : std::round(x);
  else if (nm == "round_prefer_ceil") r = frac == 0.5 ? fl + 1 : std::round(x);
  else input_error("{}: nearest_mode '{}' is not an ONNX value", c.where(), nm);
  return std::max<int64_t>(0, static_cast<int64_t>(r));
}

void resize(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.shape.size() != 4) input_error("{}: only 4-d (N, C, H, W) inputs are supported", c.where());
  const std::string mode = c.attr_string("mode", "nearest");
  if (mode != "nearest") input_error("{}: mode '{}' is not supported (nearest is)", c.where(), mode);
  std::vector<double> scale(4, 0);
  if (c.has_input(3)) {
    const Const& sizes = c.const_in(3);
    if (sizes.numel() != 4) input_error("{}: sizes must have 4 values", c.where());
    for (int a = 0; a < 4; ++a) scale[a] = sizes.at(a) / static_cast<double>(x.shape[a]);
  } else {
    const Const& sc = c.const_in(2);
    if (sc.numel() != 4) input_error("{}: scales must have 4 values", c.where());
    for (int a = 0; a < 4; ++a) scale[a] = sc.at(a);
  }
  if (scale[0] != 1 || scale[1] != 1)
    input_error("{}: scaling N or C is not supported", c.where());
  int64_t s[2];
  for (int a = 0; a < 2; ++a) {
    const double v = scale[2 + a];
    if (v < 1 || v > 64 || v != std::floor(v))
      input_error("{}: scale {} is not supported (whole factors from 1 to 64 of H and W are)", c.where(), v);
    s[a] = static_cast<int64_t>(v);
  }
  const std::string ctm = c.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nm = c.attr_string("nearest_mode", "round_prefer_floor");
  for (int a = 0; a < 2; ++a)
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t j = 0; j < s[a]; ++j)
        if (source_index(c, ctm, nm, k * s[a] + j, s[a], x.shape[2 + a] * s[a]) != k)
          input_error("{}: nearest_mode '{}' with coordinate_transformation_mode '{}' at scale {} does not copy "
                      "whole blocks; not supported",
                      c.where(), nm, ctm, s[a]);
  const int64_t ch = x.shape[1];
  auto& l = c.add_layer("Deconvolution", {x.blob}, c.out_name(0));
  auto* p = l.mutable_convolution_param();
  p->set_num_output(static_cast<uint32_t>(ch));
  p->set_group(static_cast<uint32_t>(ch));
  p->set_bias_term(false);
  p->set_kernel_h(static_cast<uint32_t>(s[0]));
  p->set_kernel_w(static_cast<uint32_t>(s[1]));
  p->set_stride_h(static_cast<uint32_t>(s[0]));
  p->set_stride_w(static_cast<uint32_t>(s[1]));
  Tensor w(Shape{ch, 1, s[0], s[1]});
  w.fill(1.f);
  c.add_param(l, std::move(w));
  c.set_output(0, {x.shape[0], ch, x.shape[2] * s[0], x.shape[3] * s[1]});
}

}  // namespace

BKS_ONNX_OP("Resize", resize);

}  // namespace bks::onnx_import
