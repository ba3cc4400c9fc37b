// BinaryConvolution: XNOR-Net's convolution, made by bakusoku deploy from a Convolution
// that read a Binarize (binarize_layers, passes/insert_binarize.h). It has Convolution's
// attributes and blobs (group 1) and computes y[o] = alpha[o] * (sign(x) * sign(W[o])) +
// b[o], alpha[o] the mean |W[o]|, where padding adds nothing (as zero padding of the
// binarized input does). Weights already on the binary grid (+-alpha) so give exactly the
// Convolution of the binarized input. Inference only.
//
// The kernel packs each input pixel's channel signs into words, gathers every output
// position's window into one bit vector (an im2col of bits), and takes each filter's dot
// product with XOR and popcount (ops/xnor_kernels.h). Windows that reach into the padding
// count the taps inside only.
#include <algorithm>

#include "core/parallel.h"
#include "ops/conv_attrs.h"
#include "ops/conv_kernels.h"
#include "ops/fused_post_ops.h"
#include "ops/op.h"
#include "ops/weight_grids.h"
#include "ops/xnor_kernels.h"

namespace bks {
namespace {

const OpDef& convolution_def() {
  static const OpDef* def = OpDefRegistry::get().find("Convolution");
  return *def;
}

// The window geometry for an input of shape `in` (N, C, H, W).
ConvGeometry binary_conv_geometry(const OpContext& c, const Shape& in) {
  ConvGeometry g = parse_conv_layer(c);
  g.n = in[0];
  g.c = in[1];
  g.h = in[2];
  g.w = in[3];
  g.oc = c.node.attrs.as<ConvAttrs>().num_output;
  g.oh = conv_out_size(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = conv_out_size(g.w, g.kw, g.sw, g.pw, g.dw);
  return g;
}

class BinaryConvolutionDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override {
    if (c.phase == proto::TRAIN) c.fail("BinaryConvolution is an inference op (bakusoku deploy makes it), not TRAIN");
    const FusedPostOps& f = c.node.deploy.fusion;
    if (f.residual_sum || f.bounded()) c.fail("BinaryConvolution takes only a fused ReLU");
    if (c.node.deploy.precision != Precision::fp32) c.fail("BinaryConvolution computes in fp32 around its bits");
    if (parse_conv_layer(c).group != 1) c.fail("convolution_param.group must be 1 for a binary convolution");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    convolution_def().infer(c, in, out);
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    return convolution_def().params(c, in);
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  int64_t output_channels(const Node& n) const override { return n.attrs.as<ConvAttrs>().num_output; }
  bool has_bias(const Node& n) const override { return n.attrs.as<ConvAttrs>().bias_term; }
};

// Each output channel's binary magnitude (the mean |w| of its c * kh * kw weights).
std::vector<float> channel_alpha(const float* w, const ConvGeometry& g) {
  const int64_t per = g.c * g.kh * g.kw;
  std::vector<float> alpha(static_cast<size_t>(g.oc));
  for (int64_t o = 0; o < g.oc; ++o) alpha[o] = binary_scale(w + o * per, 1, per);
  return alpha;
}

class BinaryConvolutionReference final : public Kernel {
 public:
  explicit BinaryConvolutionReference(const OpInit& i)
      : Kernel(i), bias_term_(i.node.attrs.as<ConvAttrs>().bias_term), fusion_(i.node.deploy.fusion) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = binary_conv_geometry(context(), in[0]);
  }
  void forward(OpCall& c) override {
    const ConvGeometry& g = g_;
    const float* x = c.in[0]->f32();
    const float* w = c.params[0]->f32();
    const float* b = bias_term_ ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    const std::vector<float> alpha = channel_alpha(w, g);
    auto sign = [](float v) { return v >= 0.f ? 1.0 : -1.0; };
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.oc; ++o)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            double dot = 0;
            for (int64_t ci = 0; ci < g.c; ++ci)
              for (int64_t ky = 0; ky < g.kh; ++ky)
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                  const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                  dot += sign(x[((n * g.c + ci) * g.h + iy) * g.w + ix]) *
                         sign(w[((o * g.c + ci) * g.kh + ky) * g.kw + kx]);
                }
            y[((n * g.oc + o) * g.oh + oy) * g.ow + ox] =
                apply_fused_relu(static_cast<float>(alpha[o] * dot + (b ? b[o] : 0.0)), fusion_);
          }
  }

 private:
  bool bias_term_;
  FusedPostOps fusion_;
  ConvGeometry g_;
};

class BinaryConvolutionKernel final : public Kernel {
 public:
  explicit BinaryConvolutionKernel(const OpInit& i)
      : Kernel(i), bias_term_(i.node.attrs.as<ConvAttrs>().bias_term), fusion_(i.node.deploy.fusion) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = binary_conv_geometry(context(), in[0]);
    cw_ = sign_words(g_.c);
    taps_ = g_.kh * g_.kw;
    patch_words_ = taps_ * cw_;
    positions_ = g_.oh * g_.ow;
    oc_pad_ = padded_filters(g_.oc);
    // The windows' bits and their counts are scratch beyond the planned tensors: bounded
    // like a tensor, before anything is allocated.
    int64_t words = 0, counts = 0;
    if (!checked_product({g_.n, positions_, patch_words_}, kMaxTensorBytes / 8, words) ||
        !checked_product({g_.n, positions_, oc_pad_}, kMaxTensorBytes / 4, counts))
      fail("the binary convolution's windows of {} would take more than {} GiB", shape_str(in[0]),
           kMaxTensorBytes >> 30);
  }

  void prepare(const std::vector<Shape>&, const std::vector<Shape>&) override {
    pixels_.assign(static_cast<size_t>(g_.n * g_.h * g_.w * cw_), 0);
    patches_.assign(static_cast<size_t>(g_.n * positions_ * patch_words_), 0);
    w_bits_.assign(static_cast<size_t>(patch_words_ * oc_pad_), 0);
    w_tap_pop_.assign(static_cast<size_t>(taps_ * oc_pad_), 0);
    zeros_.assign(static_cast<size_t>(oc_pad_), 0.f);
    counts_.assign(static_cast<size_t>(g_.n * positions_ * oc_pad_), 0);
    tap_bits_.assign(static_cast<size_t>(cw_), 0);
    // Which taps of each position's window fall in the padding (none for most).
    outside_.assign(static_cast<size_t>(positions_), {});
    for (int64_t oy = 0; oy < g_.oh; ++oy)
      for (int64_t ox = 0; ox < g_.ow; ++ox)
        for (int64_t ky = 0; ky < g_.kh; ++ky)
          for (int64_t kx = 0; kx < g_.kw; ++kx) {
            const int64_t iy = oy * g_.sh - g_.ph + ky * g_.dh, ix = ox * g_.sw - g_.pw + kx * g_.dw;
            if (iy < 0 || iy >= g_.h || ix < 0 || ix >= g_.w)
              outside_[oy * g_.ow + ox].push_back(static_cast<int32_t>(ky * g_.kw + kx));
          }
    packed_ = false;
  }

  void forward(OpCall& c) override {
    if (!packed_ || !constant_params_) pack_weights(c.params[0]->f32());
    const float* x = c.in[0]->f32();
    const float* b = bias_term_ ? c.params[1]->f32() : nullptr;
    float* y = c.out[0]->f32();
    parallel_ranges(
        g_.n,
        [&](int64_t lo, int64_t hi) {
          for (int64_t n = lo; n < hi; ++n) pack_image(x + n * g_.c * g_.h * g_.w, n);
        },
        2);
    // Every window of every image against every filter, in row ranges across the threads.
    const int64_t rows = g_.n * positions_;
    parallel_ranges(
        rows,
        [&](int64_t lo, int64_t hi) {
          xor_popcount_gemm(patches_.data() + lo * patch_words_, hi - lo, patch_words_, w_bits_.data(), oc_pad_,
                            counts_.data() + lo * oc_pad_);
          for (int64_t r = lo; r < hi; ++r) write_position(r, b, y);
        },
        std::max<int64_t>(2, kSerialBelow / std::max<int64_t>(1, patch_words_ * oc_pad_)));
  }

  std::string kernel_name() const override { return std::string("XNOR + popcount (") + popcount_path() + ")"; }

 private:
  // Filter o's signs in the windows' order (tap-major, a tap's channels in cw_ words), word-
  // major across the filters (ops/xnor_kernels.h).
  void pack_weights(const float* w) {
    alpha_ = channel_alpha(w, g_);
    for (int64_t o = 0; o < g_.oc; ++o)
      for (int64_t tap = 0; tap < taps_; ++tap) {
        pack_signs(w + o * g_.c * taps_ + tap, g_.c, taps_, tap_bits_.data());
        int32_t pop = 0;
        for (int64_t k = 0; k < cw_; ++k) {
          w_bits_[(tap * cw_ + k) * oc_pad_ + o] = tap_bits_[k];
          pop += __builtin_popcountll(tap_bits_[k]);
        }
        w_tap_pop_[tap * oc_pad_ + o] = pop;
      }
    packed_ = true;
  }

  // Output position r (image r / positions_) of every filter from its counts.
  void write_position(int64_t r, const float* b, float* y) {
    const int64_t n = r / positions_, p = r % positions_;
    int32_t* cnt = counts_.data() + r * oc_pad_;
    const std::vector<int32_t>& outside = outside_[p];
    // A tap in the padding holds zero bits: its XOR counted the filter's own bits there.
    for (int32_t tap : outside) {
      const int32_t* pop = w_tap_pop_.data() + tap * oc_pad_;
      for (int64_t o = 0; o < g_.oc; ++o) cnt[o] -= pop[o];
    }
    const float inside = static_cast<float>((taps_ - static_cast<int64_t>(outside.size())) * g_.c);
    const float* alpha = alpha_.data();
    const float* bias = b ? b : zeros_.data();
    float* out = y + n * g_.oc * positions_ + p;
    for (int64_t o = 0; o < g_.oc; ++o)
      out[o * positions_] = apply_fused_relu(alpha[o] * (inside - 2.f * static_cast<float>(cnt[o])) + bias[o], fusion_);
  }

  // Image n's pixels as channel-sign words, then each output position's window of them.
  void pack_image(const float* x, int64_t n) {
    uint64_t* pix = pixels_.data() + n * g_.h * g_.w * cw_;
    const int64_t plane = g_.h * g_.w;
    // 8 pixels at a time, each word's channels into registers; branch-free, since the signs
    // are data and a mispredicted branch per pixel costs more than its window's popcount.
    for (int64_t word = 0; word < cw_; ++word) {
      const int64_t c0 = 64 * word, c1 = std::min(g_.c, c0 + 64);
      for (int64_t i0 = 0; i0 < plane; i0 += 8) {
        uint64_t acc[8] = {};
        if (i0 + 8 <= plane) {
          for (int64_t ci = c0; ci < c1; ++ci) {
            const float* src = x + ci * plane + i0;
            for (int k = 0; k < 8; ++k) acc[k] |= static_cast<uint64_t>(src[k] >= 0.f) << (ci - c0);
          }
        } else {
          for (int64_t ci = c0; ci < c1; ++ci)
            for (int64_t k = 0; i0 + k < plane; ++k)
              acc[k] |= static_cast<uint64_t>(x[ci * plane + i0 + k] >= 0.f) << (ci - c0);
        }
        for (int64_t k = 0; k < 8 && i0 + k < plane; ++k) pix[(i0 + k) * cw_ + word] = acc[k];
      }
    }
    uint64_t* patch = patches_.data() + n * positions_ * patch_words_;
    const int64_t cw = cw_;  // a few words: plain loops beat memmove calls
    for (int64_t oy = 0; oy < g_.oh; ++oy)
      for (int64_t ox = 0; ox < g_.ow; ++ox, patch += patch_words_)
        for (int64_t ky = 0; ky < g_.kh; ++ky) {
          const int64_t iy = oy * g_.sh - g_.ph + ky * g_.dh;
          uint64_t* dst = patch + ky * g_.kw * cw;
          const uint64_t* src_row = pix + iy * g_.w * cw;
          for (int64_t kx = 0; kx < g_.kw; ++kx, dst += cw) {
            const int64_t ix = ox * g_.sw - g_.pw + kx * g_.dw;
            const bool in = iy >= 0 && iy < g_.h && ix >= 0 && ix < g_.w;
            for (int64_t k = 0; k < cw; ++k) dst[k] = in ? src_row[ix * cw + k] : 0;
          }
        }
  }

  bool bias_term_;
  FusedPostOps fusion_;
  ConvGeometry g_;
  int64_t cw_ = 0, taps_ = 0, patch_words_ = 0, positions_ = 0, oc_pad_ = 0;
  std::vector<uint64_t> pixels_, patches_, w_bits_, tap_bits_;
  std::vector<int32_t> w_tap_pop_, counts_;
  std::vector<std::vector<int32_t>> outside_;
  std::vector<float> alpha_, zeros_;
  bool packed_ = false;
};

}  // namespace

BKS_REGISTER_OP_DEF("BinaryConvolution", BinaryConvolutionDef);
BKS_REGISTER_ATTRS("BinaryConvolution", ConvAttrs, conv_from_caffe, conv_to_caffe);
BKS_REGISTER_KERNEL("BinaryConvolution", DeviceKind::cpu, BinaryConvolutionKernel, "xnor", 10, nullptr);
BKS_REGISTER_KERNEL("BinaryConvolution", DeviceKind::cpu, BinaryConvolutionReference, "reference", kReferencePriority,
                    nullptr);

}  // namespace bks
