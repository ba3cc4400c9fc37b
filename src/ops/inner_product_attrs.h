// Attributes of InnerProduct (Caffe's inner_product_param).
#pragma once

#include <string>

#include "graph/attrs.h"

namespace bks {

struct InnerProductAttrs final : AttrsOf<InnerProductAttrs> {
  int64_t num_output = 0;
  bool bias_term = true;
  FillerSpec weight_filler, bias_filler;
  int64_t axis = 1;        // features are the axes from here on
  bool transpose = false;  // weights stored (inputs, outputs) instead of (outputs, inputs)
  void visit(AttrVisitor& v) override {
    v.field("num_output", num_output);
    v.field("bias_term", bias_term);
    v.field("weight_filler", weight_filler);
    v.field("bias_filler", bias_filler);
    v.field("axis", axis);
    v.field("transpose", transpose);
  }
};

// Caffe's inner_product_param and back (BinaryInnerProduct shares them).
void inner_product_from_caffe(const proto::LayerParameter& l, InnerProductAttrs& a, const std::string& where);
void inner_product_to_caffe(const InnerProductAttrs& a, proto::LayerParameter& l);

}  // namespace bks
