// Embed: looks up row x of a (input_dim, num_output) table for each integer input x.
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

struct EmbedAttrs final : AttrsOf<EmbedAttrs> {
  int64_t num_output = 0;
  int64_t input_dim = 0;
  bool bias_term = true;
  FillerSpec weight_filler, bias_filler;
  void visit(AttrVisitor& v) override {
    v.field("num_output", num_output);
    v.field("input_dim", input_dim);
    v.field("bias_term", bias_term);
    v.field("weight_filler", weight_filler);
    v.field("bias_filler", bias_filler);
  }
};

void embed_from_caffe(const proto::LayerParameter& l, EmbedAttrs& a, const std::string&) {
  const proto::EmbedParameter& p = l.embed_param();
  a.num_output = p.num_output();
  a.input_dim = p.input_dim();
  a.bias_term = p.bias_term();
  a.weight_filler = filler_from_caffe(p.weight_filler());
  a.bias_filler = filler_from_caffe(p.bias_filler());
}
void embed_to_caffe(const EmbedAttrs& a, proto::LayerParameter& l) {
  proto::EmbedParameter* p = l.mutable_embed_param();
  p->set_num_output(static_cast<uint32_t>(a.num_output));
  p->set_input_dim(static_cast<uint32_t>(a.input_dim));
  p->set_bias_term(a.bias_term);
  *p->mutable_weight_filler() = filler_to_caffe(a.weight_filler);
  *p->mutable_bias_filler() = filler_to_caffe(a.bias_filler);
}
BKS_REGISTER_ATTRS("Embed", EmbedAttrs, embed_from_caffe, embed_to_caffe);

class EmbedDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const EmbedAttrs& p = c.node.attrs.as<EmbedAttrs>();
    if (p.num_output <= 0 || p.input_dim <= 0) c.fail("embed_param needs positive num_output and input_dim");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = in[0];
    out[0].push_back(c.node.attrs.as<EmbedAttrs>().num_output);
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>&) const override {
    const EmbedAttrs& p = c.node.attrs.as<EmbedAttrs>();
    std::vector<ParamDecl> d{{{p.input_dim, p.num_output}, p.weight_filler, true}};
    if (p.bias_term) d.push_back({{p.num_output}, p.bias_filler, true});
    return d;
  }
  // The input holds indices: it takes no gradient.
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override {
    OpFacts f;
    f.can_propagate_to.assign(in.size(), false);
    return f;
  }
};

class EmbedKernel final : public Kernel {
 public:
  explicit EmbedKernel(const OpInit& i) : Kernel(i), p_(i.node.attrs.as<EmbedAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override { m_ = shape_numel(in[0]); }
  int64_t index(float v) const {
    auto k = static_cast<int64_t>(v);
    if (k < 0 || k >= p_.input_dim || static_cast<float>(k) != v)
      runtime_error("{}: input {} is not an index in [0, {})", where_, v, p_.input_dim);
    return k;
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    float* y = c.out[0]->f32();
    int64_t n = p_.num_output;
    for (int64_t i = 0; i < m_; ++i) {
      std::memcpy(y + i * n, w + index(x[i]) * n, n * sizeof(float));
      if (p_.bias_term)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] += c.params[1]->f32()[j];
    }
  }
  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    int64_t n = p_.num_output;
    if (c.param_grad[0]) {
      float* dw = c.param_grad[0]->f32();
      c.param_grad[0]->zero();
      for (int64_t i = 0; i < m_; ++i)
        for (int64_t j = 0; j < n; ++j) dw[index(x[i]) * n + j] += dy[i * n + j];
    }
    if (p_.bias_term && c.param_grad[1]) {
      float* db = c.param_grad[1]->f32();
      c.param_grad[1]->zero();
      for (int64_t i = 0; i < m_; ++i)
        for (int64_t j = 0; j < n; ++j) db[j] += dy[i * n + j];
    }
  }

 private:
  EmbedAttrs p_;
  int64_t m_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("Embed", EmbedDef);
BKS_REGISTER_KERNEL("Embed", ::bks::DeviceKind::cpu, EmbedKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
