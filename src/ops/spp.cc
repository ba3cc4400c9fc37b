// SPP (spatial pyramid pooling, Caffe's spp_param): level l of pyramid_height pools the
// (N, C, H, W) input into about 2^l x 2^l bins, with Caffe's Pooling rules for a window
// of ceil(H / 2^l), stride the window, and the padding that covers the plane. Levels are
// flattened per item and joined level after level: (N, C * sum of bins). One level gives
// the pooled (N, C, bins, bins) blob itself, as Caffe's does.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "ops/op.h"

namespace bks {
namespace {

struct SPPAttrs final : AttrsOf<SPPAttrs> {
  enum Method { max, ave, stochastic };
  static constexpr const char* kMethods[] = {"MAX", "AVE", "STOCHASTIC"};
  int64_t pyramid_height = 0;
  int method = max;
  void visit(AttrVisitor& v) override {
    v.field("pyramid_height", pyramid_height);
    v.field("method", method, kMethods);
  }
};

void spp_from_caffe(const proto::LayerParameter& l, SPPAttrs& a, const std::string&) {
  a.pyramid_height = l.spp_param().pyramid_height();
  a.method = static_cast<int>(l.spp_param().pool());
}
void spp_to_caffe(const SPPAttrs& a, proto::LayerParameter& l) {
  l.mutable_spp_param()->set_pyramid_height(static_cast<uint32_t>(a.pyramid_height));
  l.mutable_spp_param()->set_pool(static_cast<proto::SPPParameter::PoolMethod>(a.method));
}
BKS_REGISTER_ATTRS("SPP", SPPAttrs, spp_from_caffe, spp_to_caffe);

// One level's pooling window on one axis, and how many outputs it makes.
struct LevelAxis {
  int64_t k = 1, pad = 0, out = 1;
};
// Caffe's SPP window for `bins` over `in`, sized by Caffe's Pooling output rule (ceil, and
// no window starting in the trailing padding).
LevelAxis level_axis(int64_t in, int64_t bins) {
  LevelAxis a;
  a.k = (in + bins - 1) / bins;
  a.pad = (a.k * bins - in + 1) / 2;
  a.out = (in + 2 * a.pad - a.k + a.k - 1) / a.k + 1;
  if (a.pad > 0 && (a.out - 1) * a.k >= in + a.pad) --a.out;
  return a;
}

struct Level {
  LevelAxis y, x;
  int64_t offset = 0;  // where the level's (C, oy, ox) block starts in an item's output
};
struct SPPGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1, item = 0;  // item: output floats per item
  std::vector<Level> levels;
};

SPPGeometry spp_geometry(const OpContext& c, const Shape& s) {
  const SPPAttrs& a = c.node.attrs.as<SPPAttrs>();
  if (s.size() != 4) c.fail("needs an (N, C, H, W) bottom, got shape {}", shape_str(s));
  SPPGeometry g{s[0], s[1], s[2], s[3], 0, {}};
  if (g.h <= 0 || g.w <= 0) c.fail("input plane {}x{} is empty", g.h, g.w);
  for (int64_t l = 0; l < a.pyramid_height; ++l) {
    int64_t bins = int64_t{1} << l;
    Level lv{level_axis(g.h, bins), level_axis(g.w, bins), g.item};
    // Caffe's Pooling refuses such a window; deep levels on small planes reach it.
    if (lv.y.pad >= lv.y.k || lv.x.pad >= lv.x.k)
      c.fail(
          "spp_param.pyramid_height {} is too high for the {}x{} input: level {} would pad {}x{} around a {}x{} "
          "window (Caffe's pooling needs pad < kernel)",
          a.pyramid_height, g.h, g.w, l, lv.y.pad, lv.x.pad, lv.y.k, lv.x.k);
    g.item += g.c * lv.y.out * lv.x.out;
    g.levels.push_back(lv);
  }
  return g;
}

class SPPDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    const SPPAttrs& a = c.node.attrs.as<SPPAttrs>();
    if (a.pyramid_height < 1 || a.pyramid_height > 31)
      c.fail("spp_param.pyramid_height must be given and in [1, 31], got {}", a.pyramid_height);
    if (a.method == SPPAttrs::stochastic)
      c.fail("spp_param.pool STOCHASTIC is not supported (Caffe has no CPU version of it either)");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    SPPGeometry g = spp_geometry(c, in[0]);
    if (g.levels.size() == 1)
      out[0] = {g.n, g.c, g.levels[0].y.out, g.levels[0].x.out};
    else
      out[0] = {g.n, g.item};
  }
  // MAX backward uses the positions forward recorded; AVE needs nothing.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.backward_reads_input = false;
    return f;
  }
};

class SPPKernel final : public Kernel {
 public:
  explicit SPPKernel(const OpInit& i) : Kernel(i), max_(i.node.attrs.as<SPPAttrs>().method == SPPAttrs::max) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = spp_geometry(context(), in[0]);
    argmax_.assign(static_cast<size_t>(g_.n * g_.item), 0);
  }
  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    each_window(
        [&](int64_t o, const float* plane, int64_t base, const Window& wd) {
          if (max_) {
            float best = -FLT_MAX;
            int64_t at = base + wd.y0 * g_.w + wd.x0;
            for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
              for (int64_t ix = wd.x0; ix < wd.x1; ++ix)
                if (plane[iy * g_.w + ix] > best) {  // strict: the first maximum wins, as Caffe's
                  best = plane[iy * g_.w + ix];
                  at = base + iy * g_.w + ix;
                }
            y[o] = best;
            argmax_[o] = at;
          } else {
            double sum = 0;
            for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
              for (int64_t ix = wd.x0; ix < wd.x1; ++ix) sum += plane[iy * g_.w + ix];
            y[o] = static_cast<float>(sum / static_cast<double>(wd.divisor));
          }
        },
        x);
  }
  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    c.in_grad[0]->zero();
    each_window(
        [&](int64_t o, const float*, int64_t base, const Window& wd) {
          if (max_) {
            dx[argmax_[o]] += dy[o];
            return;
          }
          float g = dy[o] / static_cast<float>(wd.divisor);
          for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
            for (int64_t ix = wd.x0; ix < wd.x1; ++ix) dx[base + iy * g_.w + ix] += g;
        },
        c.in[0]->f32());
  }

 private:
  // A window clipped to the input, and AVE's divisor: the window clipped to the padded input.
  struct Window {
    int64_t y0, y1, x0, x1, divisor;
  };
  static void clip(const LevelAxis& a, int64_t o, int64_t in, int64_t& lo, int64_t& hi, int64_t& padded) {
    lo = o * a.k - a.pad;
    hi = std::min(lo + a.k, in + a.pad);
    padded = hi - lo;
    lo = std::max<int64_t>(lo, 0);
    hi = std::min(hi, in);
  }
  // Calls f(output index, the item's input plane, the plane's offset, window) per output.
  template <class F>
  void each_window(F f, const float* x) const {
    for (int64_t n = 0; n < g_.n; ++n)
      for (const Level& lv : g_.levels)
        for (int64_t ch = 0; ch < g_.c; ++ch) {
          int64_t base = (n * g_.c + ch) * g_.h * g_.w;
          for (int64_t oy = 0; oy < lv.y.out; ++oy)
            for (int64_t ox = 0; ox < lv.x.out; ++ox) {
              Window wd{};
              int64_t ph = 0, pw = 0;
              clip(lv.y, oy, g_.h, wd.y0, wd.y1, ph);
              clip(lv.x, ox, g_.w, wd.x0, wd.x1, pw);
              wd.divisor = ph * pw;
              int64_t o = n * g_.item + lv.offset + (ch * lv.y.out + oy) * lv.x.out + ox;
              f(o, x + base, base, wd);
            }
        }
  }

  bool max_;
  SPPGeometry g_;
  std::vector<int64_t> argmax_;
};

}  // namespace

BKS_REGISTER_OP_DEF("SPP", SPPDef);
BKS_REGISTER_KERNEL("SPP", ::bks::DeviceKind::cpu, SPPKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
