// Reference kernel of Pooling (MAX, AVE) with Caffe's exact semantics, as nested loops over
// plain NCHW float32 data. Registered below oneDNN (kReferencePriority): the oracle that
// oneDNN, bakusoku's channels-last kernel and future backends are compared to.
//
// Caffe's rules: output (oy, ox) covers rows [oy * sh - ph, oy * sh - ph + kh) clipped to the
// input; MAX takes the first maximum; AVE divides by the window clipped to the padded
// input (padding counts, a ceil-mode overhang past the padding does not). The output size
// (ceil or floor rounding, the last window starting inside the input or its left padding)
// is the definition's: it arrives from shape inference.
#include <algorithm>
#include <vector>

#include "ops/op.h"
#include "ops/pooling_attrs.h"

namespace bks {
namespace {

class PoolingReference final : public Kernel {
 public:
  explicit PoolingReference(const OpInit& i) : Kernel(i), a_(pool_window(context())) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    n_ = in[0][0];
    c_ = in[0][1];
    h_ = in[0][2];
    w_ = in[0][3];
    oh_ = out[0][2];
    ow_ = out[0][3];
    kh_ = a_.global ? h_ : a_.kh;
    kw_ = a_.global ? w_ : a_.kw;
    argmax_.assign(static_cast<size_t>(n_ * c_ * oh_ * ow_), 0);
    dx_.assign(static_cast<size_t>(n_ * c_ * h_ * w_), 0.0);
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    float* mask = c.out.size() > 1 ? c.out[1]->f32() : nullptr;
    for (int64_t plane = 0; plane < n_ * c_; ++plane)
      for (int64_t oy = 0; oy < oh_; ++oy)
        for (int64_t ox = 0; ox < ow_; ++ox) {
          Window wd = window(oy, ox);
          const float* xp = x + plane * h_ * w_;
          int64_t o = (plane * oh_ + oy) * ow_ + ox;
          if (a_.max) {
            int64_t best = wd.y0 * w_ + wd.x0;
            for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
              for (int64_t ix = wd.x0; ix < wd.x1; ++ix)
                if (xp[iy * w_ + ix] > xp[best]) best = iy * w_ + ix;  // strict: the first maximum wins
            argmax_[o] = best;
            y[o] = xp[best];
            if (mask) mask[o] = static_cast<float>(best);  // Caffe's top_mask: h * width + w
          } else {
            double sum = 0.0;
            for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
              for (int64_t ix = wd.x0; ix < wd.x1; ++ix) sum += xp[iy * w_ + ix];
            y[o] = static_cast<float>(sum / static_cast<double>(wd.divisor));
          }
        }
  }

  // MAX sends each output's gradient to its winner (kept by forward: backward does not read
  // the input); AVE spreads it evenly over the window, divided as in forward.
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    std::fill(dx_.begin(), dx_.end(), 0.0);
    for (int64_t plane = 0; plane < n_ * c_; ++plane)
      for (int64_t oy = 0; oy < oh_; ++oy)
        for (int64_t ox = 0; ox < ow_; ++ox) {
          int64_t o = (plane * oh_ + oy) * ow_ + ox;
          double* dxp = dx_.data() + plane * h_ * w_;
          if (a_.max) {
            dxp[argmax_[o]] += dy[o];
            continue;
          }
          Window wd = window(oy, ox);
          for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
            for (int64_t ix = wd.x0; ix < wd.x1; ++ix) dxp[iy * w_ + ix] += dy[o] / static_cast<double>(wd.divisor);
        }
    float* dx = c.in_grad[0]->f32();
    for (size_t i = 0; i < dx_.size(); ++i) dx[i] = static_cast<float>(dx_[i]);
  }

  std::string kernel_name() const override { return "reference loops"; }

 private:
  // Output (oy, ox) reads rows [y0, y1) and columns [x0, x1) of the input; AVE divides by
  // `divisor`, the window clipped to the padded input only.
  struct Window {
    int64_t y0, y1, x0, x1, divisor;
  };
  Window window(int64_t oy, int64_t ox) const {
    int64_t ys = oy * a_.sh - a_.ph, xs = ox * a_.sw - a_.pw;
    int64_t ye = std::min(ys + kh_, h_ + a_.ph), xe = std::min(xs + kw_, w_ + a_.pw);
    return {std::max<int64_t>(ys, 0), std::min(ye, h_), std::max<int64_t>(xs, 0), std::min(xe, w_),
            (ye - ys) * (xe - xs)};
  }

  PoolWindow a_;  // the definition's, checked
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0, kh_ = 0, kw_ = 0;
  std::vector<int64_t> argmax_;  // MAX: each output's winner within its plane
  std::vector<double> dx_;       // backward's sums, rounded to float once
};

}  // namespace

BKS_REGISTER_KERNEL("Pooling", ::bks::DeviceKind::cpu, PoolingReference, "reference", kReferencePriority, nullptr);

}  // namespace bks
