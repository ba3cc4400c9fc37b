// Reference kernel of LRN (Caffe's local response normalisation) as nested loops over plain
// NCHW float32 data, summing in double. Registered below oneDNN (kReferencePriority): the
// oracle that oneDNN and future backends are compared to.
//
//   y = x * scale^-beta,  scale = k + alpha / N * (sum of x^2 over the window)
//
// ACROSS_CHANNELS: the window is local_size channels centred on x's (clipped to the
// channels), N = local_size. WITHIN_CHANNEL: a local_size x local_size square centred on x
// in its plane (clipped to the plane), N = local_size^2 and k = 1 (Caffe ignores k there).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/lrn_attrs.h"
#include "ops/op.h"

namespace bks {
namespace {

class LRNReference final : public Kernel {
 public:
  explicit LRNReference(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<LRNAttrs>()) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    n_ = in[0][0];
    c_ = in[0][1];
    h_ = in[0][2];
    w_ = in[0][3];
    scale_.assign(static_cast<size_t>(n_ * c_ * h_ * w_), 0.0);
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    compute_scales(x);
    for (size_t i = 0; i < scale_.size(); ++i) y[i] = static_cast<float>(x[i] * std::pow(scale_[i], -a_.beta));
  }

  // With s = scale and y = x s^-beta, the window relation being symmetric:
  //   dx[p] = dy[p] s[p]^-beta - 2 alpha beta / N * x[p] * sum over q in window(p) of dy[q] y[q] / s[q]
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* x = c.in[0]->f32();
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    compute_scales(x);  // backward reads the input only: recompute the scales from it
    double coeff = 2.0 * a_.alpha * a_.beta / window_count();
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t ch = 0; ch < c_; ++ch)
        for (int64_t iy = 0; iy < h_; ++iy)
          for (int64_t ix = 0; ix < w_; ++ix) {
            double sum = 0.0;
            for_window(n, ch, iy, ix, [&](int64_t q) {
              double yq = x[q] * std::pow(scale_[q], -a_.beta);
              sum += dy[q] * yq / scale_[q];
            });
            int64_t p = at(n, ch, iy, ix);
            dx[p] = static_cast<float>(dy[p] * std::pow(scale_[p], -a_.beta) - coeff * x[p] * sum);
          }
  }

  std::string kernel_name() const override { return "reference loops"; }

 private:
  int64_t at(int64_t n, int64_t ch, int64_t y, int64_t x) const { return ((n * c_ + ch) * h_ + y) * w_ + x; }
  double window_count() const {
    return a_.region == LRNAttrs::across_channels ? static_cast<double>(a_.local_size)
                                                  : static_cast<double>(a_.local_size * a_.local_size);
  }

  // Calls f(index) for every element in the window of (n, ch, y, x), clipped to the tensor.
  template <class F>
  void for_window(int64_t n, int64_t ch, int64_t y, int64_t x, F&& f) const {
    int64_t half = a_.local_size / 2;
    if (a_.region == LRNAttrs::across_channels) {
      for (int64_t cc = std::max<int64_t>(ch - half, 0); cc <= std::min(ch + half, c_ - 1); ++cc) f(at(n, cc, y, x));
      return;
    }
    for (int64_t yy = std::max<int64_t>(y - half, 0); yy <= std::min(y + half, h_ - 1); ++yy)
      for (int64_t xx = std::max<int64_t>(x - half, 0); xx <= std::min(x + half, w_ - 1); ++xx) f(at(n, ch, yy, xx));
  }

  void compute_scales(const float* x) {
    double k = a_.region == LRNAttrs::across_channels ? a_.k : 1.0;
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t ch = 0; ch < c_; ++ch)
        for (int64_t iy = 0; iy < h_; ++iy)
          for (int64_t ix = 0; ix < w_; ++ix) {
            double sum = 0.0;
            for_window(n, ch, iy, ix, [&](int64_t q) { sum += static_cast<double>(x[q]) * x[q]; });
            scale_[at(n, ch, iy, ix)] = k + a_.alpha / window_count() * sum;
          }
  }

  LRNAttrs a_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0;
  std::vector<double> scale_;  // per element, from the last compute_scales()
};

}  // namespace

BKS_REGISTER_KERNEL("LRN", ::bks::DeviceKind::cpu, LRNReference, "reference", kReferencePriority, nullptr);

}  // namespace bks
