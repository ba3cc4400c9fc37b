// Attributes of Convolution and Deconvolution (which share Caffe's convolution_param).
#pragma once

#include <string>
#include <vector>

#include "graph/attrs.h"

namespace bks {

struct ConvAttrs final : AttrsOf<ConvAttrs> {
  int64_t num_output = 0;
  bool bias_term = true;
  // Per spatial axis (height, width).
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> pad{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t group = 1;
  int64_t axis = 1;  // the channel axis
  FillerSpec weight_filler, bias_filler;
  void visit(AttrVisitor& v) override;
};

// Caffe's convolution_param: kernel_size / kernel_h+kernel_w (and the same for stride and
// pad) become per-axis lists; errors name the field.
void conv_from_caffe(const proto::LayerParameter& l, ConvAttrs& a, const std::string& where);
void conv_to_caffe(const ConvAttrs& a, proto::LayerParameter& l);

}  // namespace bks
