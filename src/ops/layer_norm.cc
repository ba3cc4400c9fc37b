// LayerNorm (layer_norm_param; ONNX LayerNormalization): each item, the axes from `axis` to
// the last, is normalised by its own mean and (biased) variance, then scaled and shifted
// elementwise by learned blobs of that block's shape:
//   y = (x - mean) / sqrt(var + eps) * g + b.
// Statistics are summed in double, so long rows keep float32's precision.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/op.h"

namespace bks {
namespace {

struct LayerNormAttrs final : AttrsOf<LayerNormAttrs> {
  int64_t axis = -1;
  float eps = 1e-5f;
  bool bias_term = true;
  void visit(AttrVisitor& v) override {
    v.field("axis", axis);
    v.field("eps", eps);
    v.field("bias_term", bias_term);
  }
};
void layer_norm_from_caffe(const proto::LayerParameter& l, LayerNormAttrs& a, const std::string&) {
  const proto::LayerNormParameter& p = l.layer_norm_param();
  a.axis = p.axis();
  a.eps = p.eps();
  a.bias_term = p.bias_term();
}
void layer_norm_to_caffe(const LayerNormAttrs& a, proto::LayerParameter& l) {
  proto::LayerNormParameter* p = l.mutable_layer_norm_param();
  p->set_axis(static_cast<int32_t>(a.axis));
  p->set_eps(a.eps);
  p->set_bias_term(a.bias_term);
}
BKS_REGISTER_ATTRS("LayerNorm", LayerNormAttrs, layer_norm_from_caffe, layer_norm_to_caffe);

// The first normalised axis of a bottom of shape s.
int norm_axis(const OpContext& c, const Shape& s) {
  const int64_t a = c.node.attrs.as<LayerNormAttrs>().axis, nd = static_cast<int64_t>(s.size());
  if (a < -nd || a >= nd) c.fail("layer_norm_param.axis {} is outside a {}-d bottom", a, nd);
  return static_cast<int>(a < 0 ? a + nd : a);
}

class LayerNormDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const float eps = c.node.attrs.as<LayerNormAttrs>().eps;
    if (!(eps >= 0.f)) c.fail("layer_norm_param.eps must be non-negative, got {}", eps);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    norm_axis(c, in[0]);
    out[0] = in[0];
  }
  // Scale (ones), then shift (zeros) with bias_term: the normalised block's shape.
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    const Shape block(in[0].begin() + norm_axis(c, in[0]), in[0].end());
    FillerSpec one, zero;
    one.value = 1.f;
    std::vector<ParamDecl> p{{block, one, true}};
    if (c.node.attrs.as<LayerNormAttrs>().bias_term) p.push_back({block, zero, true});
    return p;
  }
};

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<LayerNormAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    const int axis = norm_axis(context(), in[0]);
    rows_ = shape_count(in[0], 0, axis);
    dim_ = shape_count(in[0], axis, static_cast<int>(in[0].size()));
    mean_.assign(static_cast<size_t>(rows_), 0.0);
    rstd_.assign(mean_.size(), 0.0);
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* g = c.params[0]->f32();
    const float* b = a_.bias_term ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    stats(x);
    parallel_ranges(
        rows_,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* px = x + r * dim_;
            float* py = y + r * dim_;
            const auto m = static_cast<float>(mean_[r]), s = static_cast<float>(rstd_[r]);
            for (int64_t i = 0; i < dim_; ++i) py[i] = (px[i] - m) * s * g[i] + (b ? b[i] : 0.f);
          }
        },
        kSerialBelow / std::max<int64_t>(dim_, 1));
  }

  // With u = (x - mean) * rstd and e = dy * g: dx = rstd * (e - mean(e) - u * mean(e u)),
  // dg = sum over items of dy * u, db = sum of dy. The statistics are the forward's.
  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* g = c.params[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dg = c.param_grad[0] ? c.param_grad[0]->f32() : nullptr;
    float* db = a_.bias_term && c.param_grad[1] ? c.param_grad[1]->f32() : nullptr;
    if (dg || db) {  // row by row, in the rows' order: contiguous reads
      acc_g_.assign(static_cast<size_t>(dim_), 0.0);
      acc_b_.assign(static_cast<size_t>(dim_), 0.0);
      for (int64_t r = 0; r < rows_; ++r) {
        const float *px = x + r * dim_, *pdy = dy + r * dim_;
        const double m = mean_[r], s = rstd_[r];
        for (int64_t i = 0; i < dim_; ++i) {
          acc_g_[i] += pdy[i] * (px[i] - m) * s;
          acc_b_[i] += pdy[i];
        }
      }
      for (int64_t i = 0; i < dim_; ++i) {
        if (dg) dg[i] = static_cast<float>(acc_g_[i]);
        if (db) db[i] = static_cast<float>(acc_b_[i]);
      }
    }
    if (!c.in_grad[0]) return;
    float* dx = c.in_grad[0]->f32();
    parallel_ranges(
        rows_,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            double se = 0, seu = 0;
            for (int64_t i = 0; i < dim_; ++i) {
              const double e = static_cast<double>(dy[r * dim_ + i]) * g[i];
              se += e;
              seu += e * u(x, r, i);
            }
            const double me = se / static_cast<double>(dim_), meu = seu / static_cast<double>(dim_);
            for (int64_t i = 0; i < dim_; ++i) {
              const double e = static_cast<double>(dy[r * dim_ + i]) * g[i];
              dx[r * dim_ + i] = static_cast<float>(rstd_[r] * (e - me - u(x, r, i) * meu));
            }
          }
        },
        kSerialBelow / std::max<int64_t>(dim_, 1));
  }

 private:
  double u(const float* x, int64_t r, int64_t i) const { return (x[r * dim_ + i] - mean_[r]) * rstd_[r]; }

  // mean_ and rstd_ = 1 / sqrt(var + eps) of every item (two passes: no cancellation).
  void stats(const float* x) {
    parallel_ranges(
        rows_,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* px = x + r * dim_;
            double s = 0;
            for (int64_t i = 0; i < dim_; ++i) s += px[i];
            const double m = s / static_cast<double>(dim_);
            double v = 0;
            for (int64_t i = 0; i < dim_; ++i) v += (px[i] - m) * (px[i] - m);
            mean_[r] = m;
            rstd_[r] = 1.0 / std::sqrt(v / static_cast<double>(dim_) + a_.eps);
          }
        },
        kSerialBelow / std::max<int64_t>(dim_, 1));
  }

  LayerNormAttrs a_;
  int64_t rows_ = 0, dim_ = 1;
  std::vector<double> mean_, rstd_;  // the last forward's, per item
  std::vector<double> acc_g_, acc_b_;
};

}  // namespace

BKS_REGISTER_OP_DEF("LayerNorm", LayerNormDef);
BKS_REGISTER_KERNEL("LayerNorm", ::bks::DeviceKind::cpu, LayerNormKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
