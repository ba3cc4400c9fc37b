// Reference kernel of InnerProduct: y = x W^T + b over the axes from `axis` on, as nested
// loops over float32 data summing in double. Registered below oneDNN
// (kReferencePriority): the oracle that oneDNN and future backends are compared to.
#include "ops/inner_product_attrs.h"
#include "ops/op.h"

namespace bks {
namespace {

// No post-ops (and, registered for fp32, neither bf16 nor INT8): deploy's decisions are
// left to the oneDNN kernel.
bool reference_supports(const OpInit& i) { return !i.node.deploy.fusion.any(); }

class InnerProductReference final : public Kernel {
 public:
  explicit InnerProductReference(const OpInit& i) : Kernel(i), attrs_(i.node.attrs.as<InnerProductAttrs>()) {}

  // x is viewed as m items of k features; y as m items of n outputs.
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    int nd = static_cast<int>(in[0].size());
    int axis = canonical_axis(attrs_.axis, nd, "inner_product_param.axis");
    m_ = shape_count(in[0], 0, axis);
    k_ = shape_count(in[0], axis, nd);
    n_ = out[0].back();
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    const float* b = attrs_.bias_term ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t o = 0; o < n_; ++o) {
        double acc = b ? b[o] : 0.0;
        for (int64_t f = 0; f < k_; ++f) acc += static_cast<double>(x[i * k_ + f]) * w[w_at(o, f)];
        y[i * n_ + o] = static_cast<float>(acc);
      }
  }

  void backward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    if (c.param_grad[0]) {  // dW[o][f] = sum_i dy[i][o] x[i][f]
      float* dw = c.param_grad[0]->f32();
      for (int64_t o = 0; o < n_; ++o)
        for (int64_t f = 0; f < k_; ++f) {
          double acc = 0.0;
          for (int64_t i = 0; i < m_; ++i) acc += static_cast<double>(dy[i * n_ + o]) * x[i * k_ + f];
          dw[w_at(o, f)] = static_cast<float>(acc);
        }
    }
    if (attrs_.bias_term && c.param_grad[1]) {  // db[o] = sum_i dy[i][o]
      float* db = c.param_grad[1]->f32();
      for (int64_t o = 0; o < n_; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < m_; ++i) acc += dy[i * n_ + o];
        db[o] = static_cast<float>(acc);
      }
    }
    if (c.in_grad[0]) {  // dx[i][f] = sum_o dy[i][o] W[o][f]
      float* dx = c.in_grad[0]->f32();
      for (int64_t i = 0; i < m_; ++i)
        for (int64_t f = 0; f < k_; ++f) {
          double acc = 0.0;
          for (int64_t o = 0; o < n_; ++o) acc += static_cast<double>(dy[i * n_ + o]) * w[w_at(o, f)];
          dx[i * k_ + f] = static_cast<float>(acc);
        }
    }
  }

  std::string kernel_name() const override { return "reference loops"; }

 private:
  // Where W[o][f] is stored: (n, k), or (k, n) when transposed.
  int64_t w_at(int64_t o, int64_t f) const { return attrs_.transpose ? f * n_ + o : o * k_ + f; }

  InnerProductAttrs attrs_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
};

}  // namespace

BKS_REGISTER_KERNEL("InnerProduct", ::bks::DeviceKind::cpu, InnerProductReference, "reference", kReferencePriority,
                    reference_supports);

}  // namespace bks
