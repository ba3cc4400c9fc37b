// Permute (the SSD fork's permute_param): output axis j is input axis order[j]. Axes the
// order leaves out follow in their input order, as in the fork (order 0 2 3 1 on a 4-d
// blob turns N x C x H x W into N x H x W x C).
#include <algorithm>

#include "ops/op.h"

namespace bks {
namespace {

struct PermuteAttrs final : AttrsOf<PermuteAttrs> {
  std::vector<int64_t> order;  // as given; completed per input by full_order()
  void visit(AttrVisitor& v) override { v.field("order", order); }
};
void permute_from_caffe(const proto::LayerParameter& l, PermuteAttrs& a, const std::string&) {
  a.order.assign(l.permute_param().order().begin(), l.permute_param().order().end());
}
void permute_to_caffe(const PermuteAttrs& a, proto::LayerParameter& l) {
  proto::PermuteParameter* p = l.mutable_permute_param();
  p->clear_order();
  for (int64_t o : a.order) p->add_order(static_cast<uint32_t>(o));
}
BKS_REGISTER_ATTRS("Permute", PermuteAttrs, permute_from_caffe, permute_to_caffe);

// The order over all `ndim` axes: the given ones, then the rest ascending.
std::vector<int> full_order(const OpContext& c, int ndim) {
  const PermuteAttrs& a = c.node.attrs.as<PermuteAttrs>();
  if (static_cast<int>(a.order.size()) > ndim)
    c.fail("permute_param.order names {} axes, the bottom has {}", a.order.size(), ndim);
  std::vector<int> order;
  for (int64_t o : a.order) {
    if (o < 0 || o >= ndim) c.fail("permute_param.order {} must be less than the bottom's {} axes", o, ndim);
    order.push_back(static_cast<int>(o));
  }
  for (int i = 0; i < ndim; ++i)
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  return order;
}

class PermuteDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const auto& order = c.node.attrs.as<PermuteAttrs>().order;
    for (size_t i = 0; i < order.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (order[i] == order[j]) c.fail("permute_param.order names axis {} twice", order[i]);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    std::vector<int> order = full_order(c, static_cast<int>(in[0].size()));
    out[0].clear();
    for (int o : order) out[0].push_back(in[0][o]);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;  // a fixed gather: the gradient is the inverse scatter
    return f;
  }
};

class PermuteKernel final : public Kernel {
 public:
  explicit PermuteKernel(const OpInit& i) : Kernel(i) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    std::vector<int> order = full_order(context(), static_cast<int>(in[0].size()));
    const int nd = static_cast<int>(order.size());
    std::vector<int64_t> in_stride(nd, 1);
    for (int i = nd - 2; i >= 0; --i) in_stride[i] = in_stride[i + 1] * in[0][i + 1];
    dims_ = out[0];
    stride_.resize(nd);
    for (int j = 0; j < nd; ++j) stride_[j] = in_stride[order[j]];  // input step per output axis j
    numel_ = shape_numel(out[0]);
  }
  // Visits (output index, input index) pairs in output order: an odometer over the output's axes.
  template <class F>
  void each(F&& f) const {
    const int nd = static_cast<int>(dims_.size());
    std::vector<int64_t> idx(nd, 0);
    int64_t src = 0;
    for (int64_t i = 0; i < numel_; ++i) {
      f(i, src);
      for (int j = nd - 1; j >= 0; --j) {
        src += stride_[j];
        if (++idx[j] < dims_[j]) break;
        src -= stride_[j] * dims_[j];
        idx[j] = 0;
      }
    }
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    each([&](int64_t i, int64_t s) { y[i] = x[s]; });
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    each([&](int64_t i, int64_t s) { dx[s] = dy[i]; });
  }

 private:
  Shape dims_;
  std::vector<int64_t> stride_;
  int64_t numel_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("Permute", PermuteDef);
BKS_REGISTER_KERNEL("Permute", ::bks::DeviceKind::cpu, PermuteKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
