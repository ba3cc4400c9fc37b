// Parameter: no bottoms; its top is its one learnable blob (parameter_param.shape), so a net
// can feed a trained tensor to any layer. Caffe shares the blob's data and diff with the top;
// here forward copies the blob out and backward copies the top's gradient into the blob's.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct ParameterAttrs final : AttrsOf<ParameterAttrs> {
  std::vector<int64_t> shape;
  void visit(AttrVisitor& v) override { v.field("shape", shape); }
};

void parameter_from_caffe(const proto::LayerParameter& l, ParameterAttrs& a, const std::string&) {
  a.shape.assign(l.parameter_param().shape().dim().begin(), l.parameter_param().shape().dim().end());
}
void parameter_to_caffe(const ParameterAttrs& a, proto::LayerParameter& l) {
  proto::BlobShape* s = l.mutable_parameter_param()->mutable_shape();
  s->clear_dim();
  for (int64_t d : a.shape) s->add_dim(d);
}
BKS_REGISTER_ATTRS("Parameter", ParameterAttrs, parameter_from_caffe, parameter_to_caffe);

class ParameterDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  void check(const OpContext& c) const override {
    const Shape& s = c.node.attrs.as<ParameterAttrs>().shape;
    if (s.empty()) c.fail("parameter_param.shape needs at least one dim");
    for (int64_t d : s)
      if (d <= 0) c.fail("parameter_param.shape dims must be positive, got {}", shape_str(s));
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    out[0] = c.node.attrs.as<ParameterAttrs>().shape;
  }
  // Caffe's blob starts at zero (the layer has no filler).
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>&) const override {
    return {{c.node.attrs.as<ParameterAttrs>().shape, FillerSpec{}, true}};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class ParameterKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  void forward(OpCall& c) override { c.out[0]->copy_from(*c.params[0]); }
  void backward(OpCall& c) override {
    if (c.param_grad[0]) c.param_grad[0]->copy_from(*c.out_grad[0]);
  }
};

}  // namespace

BKS_REGISTER_OP_DEF("Parameter", ParameterDef);
BKS_REGISTER_KERNEL("Parameter", ::bks::DeviceKind::cpu, ParameterKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
