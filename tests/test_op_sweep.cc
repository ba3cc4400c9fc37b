// The registry sweep. Every op type registered in OpDefRegistry needs a case in the table
// below (sweep_cases()), and a reference kernel ("reference" or "loops" at
// kReferencePriority). For each case:
//   - the reference kernel's forward is compared to an oracle written here: the op's
//     definition as direct loops in double, independent of the kernels;
//   - the reference kernel's gradients are checked by finite differences (in double);
//   - every other kernel of the type (oneDNN, ...) runs on the same inputs, parameters and
//     output gradients, and its outputs and gradients are compared to the reference's.
// An exemption from the oracle or the gradient check is a field of the case with its
// reason, reported when the test runs (as a skip), never a silent omission. Registering a
// new op without adding a case fails OpSweep.EveryTypeHasACase.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <ostream>

#include "attention_oracle.h"
#include "conv_oracle.h"
#include "core/rng.h"
#include "detection_oracle.h"
#include "formats/caffe_net.h"
#include "formats/graph_json.h"
#include "formats/prototxt.h"
#include "graph/graph_edit.h"
#include "op_harness.h"
#include "recurrent_oracle.h"

namespace bks::test {
namespace {

// ---- Oracles: expected outputs from h.in and h.params, in double ----

using Oracle = std::function<std::vector<Tensor>(const OpHarness&)>;
using Setup = std::function<void(OpHarness&)>;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

Oracle unary(std::function<double(double)> f) {
  return [f](const OpHarness& h) {
    Tensor y(h.in[0].shape());
    for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] = static_cast<float>(f(h.in[0].f32()[i]));
    return std::vector<Tensor>{y};
  };
}

// One output equal to input 0 with another shape (Flatten, Reshape), or the same (Split).
Oracle copies(Shape shape, int count = 1) {
  return [shape, count](const OpHarness& h) {
    std::vector<Tensor> out;
    for (int k = 0; k < count; ++k) out.push_back(h.in[0].clone().view(shape));
    return out;
  };
}

Tensor scalar(double v) {
  Tensor t(Shape{});
  t.f32()[0] = static_cast<float>(v);
  return t;
}

Oracle convolution(ConvSpec k) {
  return [k](const OpHarness& h) {
    return std::vector<Tensor>{naive_conv(h.in[0], h.params[0], k.bias ? &h.params[1] : nullptr, k)};
  };
}

Oracle deconvolution(ConvSpec k) {
  return [k](const OpHarness& h) {
    return std::vector<Tensor>{naive_deconv(h.in[0], h.params[0], k.bias ? &h.params[1] : nullptr, k)};
  };
}

// y[i][o] = b[o] + sum_f x[i][f] W[o][f], x viewed as items (axes before `axis`) of features.
Oracle inner_product(int64_t num_output, int axis, bool transpose, bool bias) {
  return [=](const OpHarness& h) {
    const Tensor &x = h.in[0], &w = h.params[0];
    int64_t m = shape_count(x.shape(), 0, axis), k = shape_count(x.shape(), axis, x.ndim());
    Shape out(x.shape().begin(), x.shape().begin() + axis);
    out.push_back(num_output);
    Tensor y(out);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < num_output; ++o) {
        double s = bias ? h.params[1].f32()[o] : 0.0;
        for (int64_t f = 0; f < k; ++f)
          s += static_cast<double>(x.f32()[i * k + f]) * w.f32()[transpose ? f * num_output + o : o * k + f];
        y.f32()[i * num_output + o] = static_cast<float>(s);
      }
    return std::vector<Tensor>{y};
  };
}

// Signs of x (+1 where x >= 0, as Binarize and the XNOR kernels take them).
Tensor signs_of(const Tensor& x) {
  Tensor s(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) s.f32()[i] = x.f32()[i] >= 0.f ? 1.f : -1.f;
  return s;
}

// Weights on the binary grid: each output channel (axis 0, or the last axis when
// output_last) becomes +-(its mean |w|) by sign.
Tensor binary_weights(const Tensor& w, bool output_last) {
  Tensor b(w.shape());
  const int64_t channels = output_last ? w.shape().back() : w.shape()[0], per = w.numel() / channels;
  for (int64_t c = 0; c < channels; ++c) {
    auto at = [&](int64_t i) { return output_last ? i * channels + c : c * per + i; };
    double a = 0;
    for (int64_t i = 0; i < per; ++i) a += std::fabs(w.f32()[at(i)]);
    a /= static_cast<double>(per);
    for (int64_t i = 0; i < per; ++i) b.f32()[at(i)] = static_cast<float>(w.f32()[at(i)] >= 0.f ? a : -a);
  }
  return b;
}

// XNOR-Net's layers: the float layer on the signs of x and the binary-grid weights.
Oracle binary_convolution(ConvSpec k) {
  return [k](const OpHarness& h) {
    return std::vector<Tensor>{
        naive_conv(signs_of(h.in[0]), binary_weights(h.params[0], false), k.bias ? &h.params[1] : nullptr, k)};
  };
}
Oracle binary_inner_product(int64_t num_output, bool transpose) {
  return [=](const OpHarness& h) {
    const Tensor x = signs_of(h.in[0]), w = binary_weights(h.params[0], transpose);
    const int64_t m = x.shape()[0], k = x.numel() / m;
    Tensor y({m, num_output});
    for (int64_t i = 0; i < m; ++i)
      for (int64_t o = 0; o < num_output; ++o) {
        double s = h.params[1].f32()[o];
        for (int64_t f = 0; f < k; ++f)
          s += static_cast<double>(x.f32()[i * k + f]) * w.f32()[transpose ? f * num_output + o : o * k + f];
        y.f32()[i * num_output + o] = static_cast<float>(s);
      }
    return std::vector<Tensor>{y};
  };
}

// Caffe's pooling. Output size: ceil (or floor) of (in + 2 pad - k) / s, plus 1, minus 1
// when the last window would start in the right padding. AVE divides by the window clipped
// to the padded input; MAX takes the largest value inside the input.
struct PoolSpec {
  bool max;
  int64_t kh, kw, sh, sw, ph, pw;
  bool global = false, floor = false;
};

std::string pool_layer(const PoolSpec& p) {
  if (p.global)
    return fmt::format("type: 'Pooling' pooling_param {{ pool: {} global_pooling: true }}", p.max ? "MAX" : "AVE");
  return fmt::format(
      "type: 'Pooling' pooling_param {{ pool: {} kernel_h: {} kernel_w: {} stride_h: {} stride_w: {} pad_h: {} "
      "pad_w: {} round_mode: {} }}",
      p.max ? "MAX" : "AVE", p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.floor ? "FLOOR" : "CEIL");
}

Oracle pooling(PoolSpec p) {
  return [p](const OpHarness& h) {
    const Tensor& x = h.in[0];
    int64_t n = x.dim(0), c = x.dim(1), H = x.dim(2), W = x.dim(3);
    int64_t kh = p.global ? H : p.kh, kw = p.global ? W : p.kw;
    auto out_size = [&](int64_t in, int64_t k, int64_t s, int64_t pad) {
      double steps = static_cast<double>(in + 2 * pad - k) / static_cast<double>(s);
      auto o = static_cast<int64_t>(p.floor ? std::floor(steps) : std::ceil(steps)) + 1;
      if (pad > 0 && (o - 1) * s >= in + pad) --o;
      return o;
    };
    int64_t oh = out_size(H, kh, p.sh, p.ph), ow = out_size(W, kw, p.sw, p.pw);
    Tensor y({n, c, oh, ow});
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            int64_t hs = i * p.sh - p.ph, ws = j * p.sw - p.pw;
            int64_t he = std::min(hs + kh, H + p.ph), we = std::min(ws + kw, W + p.pw);
            double size = static_cast<double>((he - hs) * (we - ws));
            double best = -INFINITY, sum = 0;
            for (int64_t a = std::max<int64_t>(hs, 0); a < std::min(he, H); ++a)
              for (int64_t bb = std::max<int64_t>(ws, 0); bb < std::min(we, W); ++bb) {
                best = std::max<double>(best, at4(x, b, ch, a, bb));
                sum += at4(x, b, ch, a, bb);
              }
            y.f32()[((b * c + ch) * oh + i) * ow + j] = static_cast<float>(p.max ? best : sum / size);
          }
    return std::vector<Tensor>{y};
  };
}

// y = x (k + alpha / N * sum of x^2 over the window)^-beta; across channels N = size, within
// a channel an N = size^2 square and k = 1.
Oracle lrn(int size, double alpha, double beta, double k, bool across) {
  return [=](const OpHarness& h) {
    const Tensor& x = h.in[0];
    Tensor y(x.shape());
    int half = size / 2;
    for (int64_t n = 0; n < x.dim(0); ++n)
      for (int64_t c = 0; c < x.dim(1); ++c)
        for (int64_t i = 0; i < x.dim(2); ++i)
          for (int64_t j = 0; j < x.dim(3); ++j) {
            double s = 0, scale;
            if (across) {
              for (int64_t cc = c - half; cc <= c + half; ++cc)
                if (cc >= 0 && cc < x.dim(1)) s += std::pow(at4(x, n, cc, i, j), 2);
              scale = k + alpha / size * s;
            } else {
              for (int64_t a = i - half; a <= i + half; ++a)
                for (int64_t b = j - half; b <= j + half; ++b)
                  if (a >= 0 && b >= 0 && a < x.dim(2) && b < x.dim(3)) s += std::pow(at4(x, n, c, a, b), 2);
              scale = 1.0 + alpha / (size * size) * s;
            }
            y.f32()[((n * x.dim(1) + c) * x.dim(2) + i) * x.dim(3) + j] =
                static_cast<float>(at4(x, n, c, i, j) * std::pow(scale, -beta));
          }
    return std::vector<Tensor>{y};
  };
}

// Per channel (axis 1): (x - mean) / sqrt(var + eps), from the batch (biased variance), or
// from the stored sums divided by the stored normaliser.
Oracle batch_norm(bool global, double eps) {
  return [=](const OpHarness& h) {
    const Tensor& x = h.in[0];
    int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / (n * c);
    Tensor y(x.shape());
    for (int64_t ch = 0; ch < c; ++ch) {
      double mean = 0, var = 0;
      if (global) {
        double f = 1.0 / h.params[2].f32()[0];
        mean = h.params[0].f32()[ch] * f;
        var = h.params[1].f32()[ch] * f;
      } else {
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < sp; ++i) mean += x.f32()[(b * c + ch) * sp + i];
        mean /= static_cast<double>(n * sp);
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < sp; ++i) var += std::pow(x.f32()[(b * c + ch) * sp + i] - mean, 2);
        var /= static_cast<double>(n * sp);
      }
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) {
          int64_t k = (b * c + ch) * sp + i;
          y.f32()[k] = static_cast<float>((x.f32()[k] - mean) / std::sqrt(var + eps));
        }
    }
    return std::vector<Tensor>{y};
  };
}

// The SegNet/ENet forks' BN: y = scale[c] * x_hat + shift[c], x_hat the batch-normalised x
// (biased variance, eps 1e-9) in LEARN mode and x itself in INFERENCE mode.
Oracle fork_bn(bool learn) {
  return [=](const OpHarness& h) {
    Tensor y = learn ? batch_norm(false, 1e-9)(h)[0] : h.in[0].clone();
    int64_t c = y.dim(1), sp = y.numel() / (y.dim(0) * c);
    for (int64_t i = 0; i < y.numel(); ++i) {
      int64_t ch = (i / sp) % c;
      y.f32()[i] = static_cast<float>(static_cast<double>(y.f32()[i]) * h.params[0].f32()[ch] + h.params[1].f32()[ch]);
    }
    return std::vector<Tensor>{y};
  };
}

// Upsample: each x at its mask index in a zeroed (oh, ow) plane.
Oracle upsample(int64_t oh, int64_t ow) {
  return [=](const OpHarness& h) {
    const Tensor &x = h.in[0], &mask = h.in[1];
    int64_t planes = x.dim(0) * x.dim(1), in = x.dim(2) * x.dim(3);
    Tensor y({x.dim(0), x.dim(1), oh, ow});
    y.zero();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < in; ++i)
        y.f32()[p * oh * ow + static_cast<int64_t>(mask.f32()[p * in + i])] = x.f32()[p * in + i];
    return std::vector<Tensor>{y};
  };
}

// Interp (the DeepLab/PSPNet forks): bilinear with aligned corners from the input cropped
// by `crop` (-pad_beg) at the top left to h x w, to an (oh, ow) plane. Output row i reads
// the input at i * (h - 1) / (oh - 1), between its floor and the next row (none past the
// last); columns alike.
Oracle interp(int64_t crop, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  return [=](const OpHarness& hs) {
    const Tensor& x = hs.in[0];
    int64_t n = x.dim(0), c = x.dim(1);
    auto source = [](int64_t i, int64_t in, int64_t out, int64_t& lo, int64_t& hi, double& frac) {
      double r = out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
      lo = std::min(static_cast<int64_t>(std::floor(r)), in - 1);
      hi = std::min(lo + 1, in - 1);
      frac = r - static_cast<double>(lo);
    };
    Tensor y({n, c, oh, ow});
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            int64_t r0, r1, c0, c1;
            double fr, fc;
            source(i, h, oh, r0, r1, fr);
            source(j, w, ow, c0, c1, fc);
            auto v = [&](int64_t r, int64_t q) { return static_cast<double>(at4(x, b, ch, crop + r, crop + q)); };
            double top = (1 - fc) * v(r0, c0) + fc * v(r0, c1), bottom = (1 - fc) * v(r1, c0) + fc * v(r1, c1);
            y.f32()[((b * c + ch) * oh + i) * ow + j] = static_cast<float>((1 - fr) * top + fr * bottom);
          }
    return std::vector<Tensor>{y};
  };
}

// A mask as max pooling with 2x2 windows and stride 2 would write it: one index inside
// each input position's window of the (oh, ow) plane (clipped to it), chosen at random.
void pooling_mask(OpHarness& h, int64_t oh, int64_t ow) {
  Tensor& mask = h.in[1];
  int64_t planes = mask.dim(0) * mask.dim(1), H = mask.dim(2), W = mask.dim(3);
  Rng rng(11);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        int64_t r = rng.next_u32() % 2, q = rng.next_u32() % 2;
        int64_t y = std::min(2 * i + r, oh - 1), x = std::min(2 * j + q, ow - 1);
        mask.f32()[(p * H + i) * W + j] = static_cast<float>(y * ow + x);
      }
}

// Softmax over axis 1 of x viewed as (outer, channels, inner).
Tensor softmax_of(const Tensor& x) {
  int64_t outer = x.dim(0), ch = x.dim(1), inner = x.numel() / (outer * ch);
  Tensor y(x.shape());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double z = 0;
      for (int64_t c = 0; c < ch; ++c) z += std::exp(static_cast<double>(x.f32()[(o * ch + c) * inner + i]));
      for (int64_t c = 0; c < ch; ++c)
        y.f32()[(o * ch + c) * inner + i] = static_cast<float>(std::exp(x.f32()[(o * ch + c) * inner + i]) / z);
    }
  return y;
}

// -log softmax(x)[label] averaged over the items whose label is not `ignore` (VALID), each
// item's term times its class's weight when `weights` are given (SegNet's class_weighting).
Oracle softmax_loss(int ignore, std::vector<double> weights = {}) {
  return [ignore, weights](const OpHarness& h) {
    Tensor p = softmax_of(h.in[0]);
    int64_t outer = p.dim(0), ch = p.dim(1), inner = p.numel() / (outer * ch);
    double loss = 0;
    int64_t valid = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto l = static_cast<int64_t>(h.in[1].f32()[o * inner + i]);
        if (l == ignore) continue;
        loss -= std::log(p.f32()[(o * ch + l) * inner + i]) * (weights.empty() ? 1.0 : weights[l]);
        ++valid;
      }
    return std::vector<Tensor>{scalar(loss / static_cast<double>(std::max<int64_t>(valid, 1)))};
  };
}

// Classes of item row `scores` (ch of them, stride `inner`) by descending score, ties by
// index.
std::vector<int64_t> ranking(const float* scores, int64_t ch, int64_t inner) {
  std::vector<int64_t> idx(static_cast<size_t>(ch));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return scores[a * inner] > scores[b * inner]; });
  return idx;
}

// Fraction of (N, C) items whose label ranks in the top k (the test's scores have no
// ties), and per class.
Oracle accuracy(int64_t top_k) {
  return [top_k](const OpHarness& h) {
    int64_t n = h.in[0].dim(0), ch = h.in[0].dim(1);
    std::vector<double> total(ch), hit(ch);
    for (int64_t i = 0; i < n; ++i) {
      auto l = static_cast<int64_t>(h.in[1].f32()[i]);
      std::vector<int64_t> r = ranking(h.in[0].f32() + i * ch, ch, 1);
      total[l] += 1;
      hit[l] += std::find(r.begin(), r.begin() + top_k, l) != r.begin() + top_k;
    }
    Tensor per_class({ch});
    for (int64_t c = 0; c < ch; ++c) per_class.f32()[c] = static_cast<float>(total[c] ? hit[c] / total[c] : 0.0);
    double hits = std::accumulate(hit.begin(), hit.end(), 0.0);
    return std::vector<Tensor>{scalar(hits / static_cast<double>(n)), per_class};
  };
}

// ---- Input setups: values the op needs (labels, indices, distinct or kink-free inputs) ----

// Moves every input value within 0.05 of one of `points` (kinks, clip bounds) 0.1 away.
Setup away_from(std::vector<float> points) {
  return [points](OpHarness& h) {
    for (auto& t : h.in)
      for (int64_t i = 0; i < t.numel(); ++i)
        for (float p : points)
          if (std::fabs(t.f32()[i] - p) < 0.05f) t.f32()[i] += 0.1f;
  };
}
const Setup off_zero = away_from({0.f});

// Distinct values at least 0.01 apart (no ties within a finite-difference step).
void distinct_input(OpHarness& h) {
  for (int64_t i = 0; i < h.in[0].numel(); ++i) h.in[0].f32()[i] = static_cast<float>((i * 7919) % 997) * 0.01f - 5.f;
}

// Input k holds labels i % classes, with every `ignore_every`-th item set to `ignore`.
Setup labels(int k, int64_t classes, int ignore_every = 0, int ignore = -1) {
  return [=](OpHarness& h) {
    for (int64_t i = 0; i < h.in[k].numel(); ++i)
      h.in[k].f32()[i] = ignore_every && i % ignore_every == 0 ? static_cast<float>(ignore)
                                                               : static_cast<float>((i * 5 + 1) % classes);
  };
}

// ---- The table ----

// Every field has a default, so a case names only what it needs.
struct SweepCase {
  std::string name{};  // the test's name: the type, or Type_variant
  std::string layer{};
  std::vector<Shape> in{};
  Oracle oracle{};            // the expected outputs; null only with no_oracle
  std::string no_oracle{};    // why the forward has no oracle (an exemption, with its reason)
  std::string no_gradient{};  // why there is no gradient check
  int outputs = 1;
  Phase phase = proto::TRAIN;
  float lo = -1.f, hi = 1.f;       // the random inputs' range
  Setup setup{};                   // then adjusted by this
  std::vector<int> grad_inputs{};  // for check_gradients (empty: all that propagate; {-1}: none)
  float fwd_tol = 1e-5f, step = 1e-3f, grad_tol = 1e-2f;
  float kernel_tol = 1e-4f;  // other kernels against the reference
  std::string no_other_kernels{};  // why only the reference kernel computes this case
};

void PrintTo(const SweepCase& c, std::ostream* os) { *os << c.name; }

const char* const kNoBackward = "no backward pass: the definition declares no gradient (no_backward_facts)";
const char* const kDataExempt =
    "reads a dataset file (no computation to check against an oracle, no gradient); the loader and readers are "
    "tested in test_formats and test_cli";

// The element of a tensor of shape s that output element i (of shape out, which s
// broadcasts to, NumPy's way) reads: its coordinates, 0 along s's axes of size 1.
int64_t broadcast_source(const Shape& s, const Shape& out, int64_t i) {
  int64_t src = 0, stride = 1;
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t ax = out.size() - 1 - j;
    const int64_t coord = i % out[ax];
    i /= out[ax];
    if (j < s.size()) {
      const int64_t size = s[s.size() - 1 - j];
      src += (size == 1 ? 0 : coord) * stride;
      stride *= size;
    }
  }
  return src;
}

Shape broadcast_of(const Shape& a, const Shape& b) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd, 1);
  for (size_t j = 0; j < nd; ++j) {
    const int64_t x = j < a.size() ? a[a.size() - 1 - j] : 1, y = j < b.size() ? b[b.size() - 1 - j] : 1;
    out[nd - 1 - j] = std::max(x, y);
  }
  return out;
}

Oracle broadcast_binary(std::function<double(double, double)> f) {
  return [f](const OpHarness& h) {
    const Shape &a = h.in[0].shape(), &b = h.in[1].shape();
    Tensor y(broadcast_of(a, b));
    for (int64_t i = 0; i < y.numel(); ++i)
      y.f32()[i] = static_cast<float>(f(h.in[0].f32()[broadcast_source(a, y.shape(), i)],
                                        h.in[1].f32()[broadcast_source(b, y.shape(), i)]));
    return std::vector<Tensor>{y};
  };
}

// Per index of the broadcast batch axes, the product of A's and B's matrices there.
Tensor batch_matmul_of(const Tensor& a, const Tensor& b) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape batch = broadcast_of(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  Shape out = batch;
  out.push_back(m);
  out.push_back(n);
  Tensor y(out);
  for (int64_t t = 0; t < shape_numel(batch); ++t) {
    const float* pa = a.f32() + broadcast_source(Shape(sa.begin(), sa.end() - 2), batch, t) * m * k;
    const float* pb = b.f32() + broadcast_source(Shape(sb.begin(), sb.end() - 2), batch, t) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(pa[i * k + p]) * pb[p * n + j];
        y.f32()[(t * m + i) * n + j] = static_cast<float>(acc);
      }
  }
  return y;
}

// LayerNorm over the axes from `axis`: (x - mean) / sqrt(var + eps) * g (+ b).
Oracle layer_norm(int axis, double eps, bool bias) {
  return [=](const OpHarness& h) {
    const Tensor& x = h.in[0];
    const int a = axis < 0 ? axis + x.ndim() : axis;
    const int64_t dim = shape_count(x.shape(), a, x.ndim()), rows = x.numel() / dim;
    Tensor y(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      const float* px = x.f32() + r * dim;
      double m = 0, v = 0;
      for (int64_t i = 0; i < dim; ++i) m += px[i];
      m /= static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) v += (px[i] - m) * (px[i] - m);
      v /= static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i)
        y.f32()[r * dim + i] = static_cast<float>((px[i] - m) / std::sqrt(v + eps) * h.params[0].f32()[i] +
                                                  (bias ? h.params[1].f32()[i] : 0.0));
    }
    return std::vector<Tensor>{y};
  };
}

// Random scale and shift blobs, so their gradients are checked away from 1 and 0.
void randomize_params(OpHarness& h) {
  Rng rng(3);
  for (Tensor& p : h.params)
    for (int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = rng.uniform(0.5f, 1.5f);
}

// The ops of a transformer encoder as the ONNX importer writes it.
void add_transformer_cases(std::vector<SweepCase>& t) {
  t.push_back({.name = "LayerNorm",
               .layer = "type: 'LayerNorm'",
               .in = {{2, 3, 8}},
               .oracle = layer_norm(-1, 1e-5, true),
               .lo = -2,
               .hi = 3,
               .setup = randomize_params});
  t.push_back({.name = "LayerNorm_two_axes_no_bias",
               .layer = "type: 'LayerNorm' layer_norm_param { axis: 1 eps: 0.1 bias_term: false }",
               .in = {{3, 2, 4}},
               .oracle = layer_norm(1, 0.1, false),
               .setup = randomize_params});
  const std::pair<const char*, std::function<double(double, double)>> ops[] = {
      {"ADD", [](double a, double b) { return a + b; }},
      {"SUB", [](double a, double b) { return a - b; }},
      {"MUL", [](double a, double b) { return a * b; }},
      {"DIV", [](double a, double b) { return a / b; }}};
  for (const auto& [op, f] : ops)
    t.push_back({.name = fmt::format("Arithmetic_{}", op),
                 .layer = fmt::format("type: 'Arithmetic' arithmetic_param {{ operation: {} }}", op),
                 .in = {{2, 3, 4}, {3, 1}},
                 .oracle = broadcast_binary(f),
                 .setup = [](OpHarness& h) {  // divisors in [1, 2)
                   for (int64_t i = 0; i < h.in[1].numel(); ++i) h.in[1].f32()[i] = 1.5f + 0.5f * h.in[1].f32()[i];
                 }});
  t.push_back({.name = "BatchMatMul",
               .layer = "type: 'BatchMatMul'",
               .in = {{2, 3, 4, 5}, {2, 3, 5, 2}},
               .oracle = [](const OpHarness& h) { return std::vector<Tensor>{batch_matmul_of(h.in[0], h.in[1])}; }});
  t.push_back({.name = "BatchMatMul_broadcast",
               .layer = "type: 'BatchMatMul'",
               .in = {{2, 1, 3, 4}, {3, 4, 5}},
               .oracle = [](const OpHarness& h) { return std::vector<Tensor>{batch_matmul_of(h.in[0], h.in[1])}; }});
  // x[1:, :, ::-2] and x[:, 2:3] of (3, 2, 5): steps back, a negative start, clamped ends.
  auto sliced = [](std::vector<std::array<int64_t, 3>> ax) {  // per axis: first, step, count
    return [ax](const OpHarness& h) {
      const Shape& is = h.in[0].shape();
      Shape os;
      for (const auto& a : ax) os.push_back(a[2]);
      Tensor y(os);
      for (int64_t i = 0; i < y.numel(); ++i) {
        int64_t rem = i, src = 0, stride = 1;
        for (size_t j = os.size(); j-- > 0;) {
          src += (ax[j][0] + (rem % os[j]) * ax[j][1]) * stride;
          rem /= os[j];
          stride *= is[j];
        }
        y.f32()[i] = h.in[0].f32()[src];
      }
      return std::vector<Tensor>{y};
    };
  };
  t.push_back({.name = "StridedSlice",
               .layer = "type: 'StridedSlice' strided_slice_param { axis: 0 start: 1 end: 99 axis: 2 start: -1 end: "
                        "-99 step: 1 step: -2 }",
               .in = {{3, 2, 5}},
               .oracle = sliced({{1, 1, 2}, {0, 1, 2}, {4, -2, 3}})});
  t.push_back({.name = "StridedSlice_middle",
               .layer = "type: 'StridedSlice' strided_slice_param { axis: 1 start: 2 end: 3 }",
               .in = {{2, 4}},
               .oracle = sliced({{0, 1, 2}, {2, 1, 1}})});
}

// RNN, LSTM, GRU: T = 3 timesteps of N = 2 streams. cont starts every stream's sequence at
// t = 0 (so the state one forward carries to the next cannot change the next: the gradient
// check runs many) and restarts stream 1 at t = 2; with exposed states, stream 0 instead
// continues from its given h_0 (and c_0).
void add_recurrent_cases(std::vector<SweepCase>& t) {
  const std::pair<const char*, Cell> cells[] = {{"RNN", Cell::rnn}, {"LSTM", Cell::lstm}, {"GRU", Cell::gru}};
  for (const auto& type_and_cell : cells) {
    // (Named copies: clang before 16 cannot capture structured bindings.)
    const char* type = type_and_cell.first;
    const Cell cell = type_and_cell.second;
    const int states = cell == Cell::lstm ? 2 : 1;
    // Variants: neither; a static input and exposed states; exposed states alone; neither,
    // with a reset at every step (three segments: oneDNN's kernels hand those to matmul).
    for (int variant = 0; variant < 4; ++variant) {
      const bool exposed = variant == 1 || variant == 2, has_static = variant == 1, resets = variant == 3;
      std::vector<Shape> in{{3, 2, 2, 2}, {3, 2}};
      if (has_static) in.push_back({2, 3});
      for (int k = 0; exposed && k < states; ++k) in.push_back({1, 2, 4});
      t.push_back(
          {.name = std::string(type) + (has_static ? "_static" : "") + (exposed ? "_exposed" : "") +
                   (resets ? "_resets" : ""),
           .layer = std::string("type: '") + type + "' recurrent_param { num_output: 4" +
                    (exposed ? " expose_hidden: true" : "") + " }",
           .in = in,
           .oracle = [cell, has_static, exposed](
                         const OpHarness& h) { return recurrent_oracle(cell, 4, has_static, exposed, h.in, h.params); },
           .outputs = 1 + (exposed ? states : 0),
           .setup =
               [exposed, resets](OpHarness& h) {
                 const float cont[] = {exposed ? 1.f : 0.f, 0, resets ? 0.f : 1.f, 1, 1, 0};
                 std::copy(cont, cont + 6, h.in[1].f32());
               },
           .fwd_tol = 1e-4f});
    }
  }
  // LSTMUnit: one step of 2 streams, the second starting afresh (cont 0).
  t.push_back({.name = "LSTMUnit",
               .layer = "type: 'LSTMUnit'",
               .in = {{1, 2, 3}, {1, 2, 12}, {1, 2}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor c({1, 2, 3}), hh({1, 2, 3});
                     for (int n = 0; n < 2; ++n)
                       for (int d = 0; d < 3; ++d) {
                         const float* x = h.in[1].f32() + n * 12 + d;
                         const double cell = h.in[2].f32()[n] * sigmoid(x[3]) * h.in[0].f32()[n * 3 + d] +
                                             sigmoid(x[0]) * std::tanh(x[9]);
                         c.f32()[n * 3 + d] = static_cast<float>(cell);
                         hh.f32()[n * 3 + d] = static_cast<float>(sigmoid(x[6]) * std::tanh(cell));
                       }
                     return std::vector<Tensor>{c, hh};
                   },
               .outputs = 2,
               .lo = -2,
               .hi = 2,
               .setup =
                   [](OpHarness& h) {
                     h.in[2].f32()[0] = 1.f;
                     h.in[2].f32()[1] = 0.f;
                   }});
}

// MultiHeadAttention over (T, N, D) = (4, 2, 6), and PositionalEncoding. PERFORMER's
// features are the harness's random blob (not drawn: it is not zero), which the oracle reads.
void add_attention_cases(std::vector<SweepCase>& t) {
  struct Variant {
    const char* name;
    const char* fields;
    AttentionSpec spec;
  };
  const Variant variants[] = {
      {"MultiHeadAttention", "num_heads: 2", {.heads = 2}},
      {"MultiHeadAttention_causal_wider",
       "num_heads: 2 head_dim: 4 num_output: 5 causal: true bias_term: false",
       {.heads = 2, .head_dim = 4, .out = 5, .causal = true, .bias = false}},
      {"MultiHeadAttention_performer",
       "num_heads: 3 kernel: PERFORMER num_features: 6",
       {.heads = 3, .performer = true}},
      {"MultiHeadAttention_performer_causal",
       "num_heads: 2 kernel: PERFORMER num_features: 5 causal: true",
       {.heads = 2, .causal = true, .performer = true}},
  };
  for (const Variant& v : variants) {
    const AttentionSpec spec = v.spec;
    t.push_back(
        {.name = v.name,
         .layer = std::string("type: 'MultiHeadAttention' attention_param { ") + v.fields + " }",
         .in = {{4, 2, 6}},
         .oracle =
             [spec](const OpHarness& h) { return std::vector<Tensor>{attention_oracle(spec, h.in[0], h.params)}; },
         .lo = -2,
         .hi = 2});
  }
  auto positions = [](int axis, bool learned) {
    return [=](const OpHarness& h) {
      const Tensor& x = h.in[0];
      Tensor y(x.shape());
      const int64_t d = x.shape().back(), t_count = x.dim(axis);
      const int64_t stride = shape_count(x.shape(), axis + 1, x.ndim());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t pos = i / stride % t_count, e = i % d;
        const double angle =
            static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(e - e % 2) / static_cast<double>(d));
        const double p = learned ? h.params[0].f32()[pos * d + e] : (e % 2 == 0 ? std::sin(angle) : std::cos(angle));
        y.f32()[i] = static_cast<float>(x.f32()[i] + p);
      }
      return std::vector<Tensor>{y};
    };
  };
  t.push_back({.name = "PositionalEncoding",
               .layer = "type: 'PositionalEncoding' positional_encoding_param { max_length: 5 }",
               .in = {{4, 2, 6}},
               .oracle = positions(0, true)});
  t.push_back({.name = "PositionalEncoding_sinusoidal_axis1",
               .layer = "type: 'PositionalEncoding' positional_encoding_param { kind: SINUSOIDAL axis: 1 }",
               .in = {{2, 5, 3, 4}},
               .oracle = positions(1, false)});
}

std::vector<SweepCase> build_cases() {
  std::vector<SweepCase> t;
  add_transformer_cases(t);
  add_attention_cases(t);
  add_recurrent_cases(t);
  auto act = [&](const char* name, std::string layer, std::function<double(double)> f, float lo, float hi,
                 Setup setup = {}) {
    t.push_back({.name = name,
                 .layer = std::move(layer),
                 .in = {{2, 3, 4, 5}},
                 .oracle = unary(std::move(f)),
                 .lo = lo,
                 .hi = hi,
                 .setup = std::move(setup)});
  };
  act(
      "AbsVal", "type: 'AbsVal'", [](double x) { return std::fabs(x); }, -2, 2, off_zero);
  act(
      "BNLL", "type: 'BNLL'", [](double x) { return std::log1p(std::exp(x)); }, -3, 3);
  act(
      "Clip", "type: 'Clip' clip_param { min: -0.5 max: 0.7 }", [](double x) { return std::clamp(x, -0.5, 0.7); }, -1,
      1, away_from({-0.5f, 0.7f}));
  act(
      "ELU", "type: 'ELU' elu_param { alpha: 0.7 }", [](double x) { return x > 0 ? x : 0.7 * std::expm1(x); }, -2, 2,
      off_zero);
  act(
      "Exp", "type: 'Exp' exp_param { base: 2 scale: 0.5 shift: 0.1 }",
      [](double x) { return std::pow(2.0, 0.1 + 0.5 * x); }, -2, 2);
  act(
      "Log", "type: 'Log' log_param { base: 10 scale: 2 shift: 5 }", [](double x) { return std::log10(5 + 2 * x); }, -2,
      2);
  act(
      "Power", "type: 'Power' power_param { power: 2 scale: 0.5 shift: 1.5 }",
      [](double x) { return std::pow(1.5 + 0.5 * x, 2); }, -2, 2);
  act(
      "ReLU", "type: 'ReLU'", [](double x) { return std::max(x, 0.0); }, -2, 2, off_zero);
  act(
      "ReLU_leaky", "type: 'ReLU' relu_param { negative_slope: 0.1 }", [](double x) { return x > 0 ? x : 0.1 * x; }, -2,
      2, off_zero);
  act(
      "ReLU6", "type: 'ReLU6'", [](double x) { return std::clamp(x, 0.0, 6.0); }, -3, 9, away_from({0.f, 6.f}));
  act("Sigmoid", "type: 'Sigmoid'", sigmoid, -4, 4);
  act(
      "Erf", "type: 'Erf'", [](double x) { return std::erf(x); }, -2.5f, 2.5f);
  act(
      "GELU", "type: 'GELU'", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4, 4);
  act(
      "GELU_tanh", "type: 'GELU' gelu_param { approximate: TANH }",
      [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -4, 4);
  act(
      "Swish", "type: 'Swish' swish_param { beta: 1.5 }", [](double x) { return x * sigmoid(1.5 * x); }, -3, 3);
  act(
      "TanH", "type: 'TanH'", [](double x) { return std::tanh(x); }, -3, 3);
  // A step: its gradient is zero away from the threshold (Caffe has none at all).
  act(
      "Threshold", "type: 'Threshold' threshold_param { threshold: 0.3 }", [](double x) { return x > 0.3 ? 1.0 : 0.0; },
      -1, 1, away_from({0.3f}));

  // Convolution: odd sizes, groups, stride, padding, dilation, depthwise, no bias.
  auto conv = [&](const char* name, Shape in, ConvSpec k) {
    t.push_back(
        {.name = name, .layer = conv_layer("Convolution", k), .in = {in}, .oracle = convolution(k), .step = 1e-2f});
  };
  conv("Convolution", {2, 3, 7, 6}, {4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true});
  conv("Convolution_group_stride_pad", {1, 4, 9, 7}, {6, 3, 2, 2, 1, 1, 0, 1, 1, 2, true});
  conv("Convolution_dilation_nobias", {2, 2, 8, 9}, {3, 3, 3, 1, 2, 2, 1, 2, 1, 1, false});
  conv("Convolution_depthwise", {1, 6, 5, 5}, {6, 3, 3, 1, 1, 1, 1, 1, 1, 6, true});
  conv("Convolution_5x5_pad2", {3, 1, 6, 5}, {2, 5, 5, 1, 1, 2, 2, 1, 1, 1, true});
  // The forks' depthwise types: the same op under their names. ConvolutionDepthwise ignores
  // the file's group (one output channel per input channel); DepthwiseConvolution is a
  // Convolution with the file's group.
  {
    ConvSpec k{5, 3, 3, 2, 1, 1, 0, 1, 2, 5, true};
    ConvSpec file = k;
    file.group = 1;
    t.push_back({.name = "ConvolutionDepthwise",
                 .layer = conv_layer("ConvolutionDepthwise", file),
                 .in = {{2, 5, 7, 8}},
                 .oracle = convolution(k),
                 .step = 1e-2f});
    ConvSpec nb{4, 3, 3, 1, 1, 1, 1, 1, 1, 4, false};
    t.push_back(
        {.name = "ConvolutionDepthwise_nobias_inference",
         .layer = "type: 'ConvolutionDepthwise' convolution_param { num_output: 4 kernel_size: 3 pad: 1 "
                  "bias_term: false }",
         .in = {{1, 4, 6, 6}},
         .oracle = convolution(nb),
         .no_gradient = "TEST phase: the oneDNN kernel builds no backward pass; the TRAIN cases check gradients",
         .phase = proto::TEST});
    ConvSpec dw{6, 3, 3, 1, 1, 1, 1, 1, 1, 3, true};
    t.push_back({.name = "DepthwiseConvolution",
                 .layer = conv_layer("DepthwiseConvolution", dw),
                 .in = {{1, 3, 5, 6}},
                 .oracle = convolution(dw),
                 .step = 1e-2f});
  }
  {
    ConvSpec k{4, 3, 3, 2, 2, 1, 1, 1, 1, 1, true};
    t.push_back(
        {.name = "Convolution_inference",
         .layer = conv_layer("Convolution", k),
         .in = {{2, 3, 7, 7}},
         .oracle = convolution(k),
         .no_gradient = "TEST phase: the oneDNN kernel builds no backward pass; the TRAIN cases check gradients",
         .phase = proto::TEST});
  }
  auto deconv = [&](const char* name, Shape in, ConvSpec k) {
    t.push_back(
        {.name = name, .layer = conv_layer("Deconvolution", k), .in = {in}, .oracle = deconvolution(k), .step = 1e-2f});
  };
  deconv("Deconvolution", {2, 2, 4, 3}, {3, 3, 3, 2, 2, 1, 1, 1, 1, 1, true});
  deconv("Deconvolution_group_dilation_nobias", {1, 4, 3, 4}, {6, 3, 2, 1, 2, 0, 1, 2, 1, 2, false});
  deconv("Deconvolution_rect_stride", {2, 3, 3, 3}, {2, 2, 3, 3, 1, 0, 1, 1, 1, 1, true});
  // Strides oneDNN has only a reference for (FCN's upsampling; sgemm + col2im runs them).
  deconv("Deconvolution_large_stride", {1, 2, 2, 3}, {2, 8, 8, 4, 4, 2, 2, 1, 1, 1, true});
  deconv("Deconvolution_per_channel", {1, 3, 3, 4}, {3, 4, 4, 2, 2, 1, 1, 1, 1, 3, false});

  auto ip = [&](const char* name, std::string layer, Shape in, int64_t n, int axis, bool transpose, bool bias) {
    t.push_back({.name = name,
                 .layer = std::move(layer),
                 .in = {in},
                 .oracle = inner_product(n, axis, transpose, bias),
                 .step = 1e-2f});
  };
  ip("InnerProduct", "type: 'InnerProduct' inner_product_param { num_output: 5 }", {3, 2, 2, 2}, 5, 1, false, true);
  ip("InnerProduct_transpose", "type: 'InnerProduct' inner_product_param { num_output: 4 transpose: true }", {2, 3}, 4,
     1, true, true);
  ip("InnerProduct_axis2", "type: 'InnerProduct' inner_product_param { num_output: 3 axis: 2 }", {2, 3, 4}, 3, 2, false,
     true);
  ip("InnerProduct_nobias", "type: 'InnerProduct' inner_product_param { num_output: 3 bias_term: false }", {4, 5}, 3, 1,
     false, false);

  // Pooling: ceil overhang, padding (AVE divisor with and without the overhang), floor
  // rounding, rectangular windows, global. MAX inputs are distinct, so there are no ties.
  auto pool = [&](const char* name, Shape in, PoolSpec p, Phase phase = proto::TRAIN) {
    SweepCase c{.name = name, .layer = pool_layer(p), .in = {in}, .oracle = pooling(p), .phase = phase};
    if (p.max) c.setup = distinct_input;
    if (phase == proto::TEST)
      c.no_gradient = "TEST phase: the oneDNN kernel builds no backward pass; the TRAIN cases check gradients";
    t.push_back(std::move(c));
  };
  pool("Pooling", {2, 3, 8, 8}, {true, 2, 2, 2, 2, 0, 0});
  pool("Pooling_max_ceil_overhang", {1, 2, 8, 9}, {true, 3, 3, 2, 2, 0, 0});
  pool("Pooling_max_pad", {1, 2, 7, 7}, {true, 3, 3, 2, 2, 1, 1});
  pool("Pooling_max_floor", {1, 2, 8, 8}, {true, 3, 3, 2, 2, 0, 0, false, true});
  pool("Pooling_ave", {2, 2, 8, 8}, {false, 3, 3, 2, 2, 0, 0});
  pool("Pooling_ave_pad_overhang", {1, 3, 7, 6}, {false, 3, 3, 2, 2, 1, 1});
  pool("Pooling_ave_pad", {1, 1, 6, 6}, {false, 2, 2, 2, 2, 1, 1});
  pool("Pooling_ave_rect", {1, 2, 7, 5}, {false, 3, 2, 2, 1, 1, 0});
  pool("Pooling_ave_global", {2, 3, 5, 4}, {false, 0, 0, 1, 1, 0, 0, true});
  pool("Pooling_max_global", {2, 3, 5, 4}, {true, 0, 0, 1, 1, 0, 0, true});
  pool("Pooling_ave_inference", {1, 3, 7, 6}, {false, 3, 3, 2, 2, 1, 1}, proto::TEST);
  // Inference on plain NCHW runs bakusoku's own kernel (pooling_plain.h): GoogLeNet's 3x3/1
  // pad 1, ceil overhang, rectangular strides, rows wider than a vector.
  pool("Pooling_max_inference_3x3s1", {2, 3, 9, 21}, {true, 3, 3, 1, 1, 1, 1}, proto::TEST);
  pool("Pooling_max_inference_overhang", {1, 2, 8, 19}, {true, 3, 3, 2, 2, 0, 0}, proto::TEST);
  pool("Pooling_max_inference_rect", {1, 2, 7, 20}, {true, 2, 3, 3, 2, 1, 0}, proto::TEST);
  pool("Pooling_ave_inference_3x3s1", {1, 3, 9, 21}, {false, 3, 3, 1, 1, 1, 1}, proto::TEST);
  {
    // The forks' ceil_mode spelling, and MAX's second top: each winner's index in its plane.
    PoolSpec p{true, 3, 3, 2, 2, 0, 0, false, true};
    std::string layer = pool_layer(p);
    layer.replace(layer.find("round_mode: FLOOR"), 17, "ceil_mode: false");
    t.push_back({.name = "Pooling_ceil_mode_false", .layer = layer, .in = {{1, 2, 8, 8}}, .oracle = pooling(p),
                 .setup = distinct_input});
    PoolSpec m{true, 2, 2, 2, 2, 0, 0};
    t.push_back({.name = "Pooling_max_mask",
                 .layer = pool_layer(m),
                 .in = {{2, 3, 6, 5}},
                 .oracle =
                     [m](const OpHarness& h) {
                       std::vector<Tensor> out = pooling(m)(h);
                       const Tensor& x = h.in[0];
                       const Tensor& y = out[0];
                       Tensor mask(y.shape());
                       int64_t H = x.dim(2), W = x.dim(3), oh = y.dim(2), ow = y.dim(3);
                       for (int64_t pl = 0; pl < x.dim(0) * x.dim(1); ++pl)
                         for (int64_t k = 0; k < oh * ow; ++k) {
                           int64_t best = -1;
                           for (int64_t a = (k / ow) * 2; a < std::min((k / ow) * 2 + 2, H); ++a)
                             for (int64_t b = (k % ow) * 2; b < std::min((k % ow) * 2 + 2, W); ++b)
                               if (best < 0 || x.f32()[pl * H * W + a * W + b] > x.f32()[pl * H * W + best])
                                 best = a * W + b;
                           mask.f32()[pl * oh * ow + k] = static_cast<float>(best);
                         }
                       out.push_back(mask);
                       return out;
                     },
                 .outputs = 2,
                 .setup = distinct_input,
                 .no_other_kernels = "the mask top is the reference kernel's (oneDNN's refuses a second top)"});
  }
  // Upsample (the forks' max unpooling) from a pooling mask; the mask takes no gradient.
  t.push_back({.name = "Upsample",
               .layer = "type: 'Upsample' upsample_param { scale: 2 }",
               .in = {{2, 3, 3, 4}, {2, 3, 3, 4}},
               .oracle = upsample(6, 8),
               .setup = [](OpHarness& h) { pooling_mask(h, 6, 8); },
               .grad_inputs = {0}});
  t.push_back({.name = "Upsample_size",
               .layer = "type: 'Upsample' upsample_param { upsample_h: 5 upsample_w: 7 }",
               .in = {{1, 2, 2, 3}, {1, 2, 2, 3}},
               .oracle = upsample(5, 7),
               .setup = [](OpHarness& h) { pooling_mask(h, 5, 7); },
               .grad_inputs = {0}});
  t.push_back({.name = "Upsample_pad_out",
               .layer = "type: 'Upsample' upsample_param { scale_h: 2 scale_w: 3 pad_out_h: true }",
               .in = {{1, 1, 3, 2}, {1, 1, 3, 2}},
               .oracle = upsample(5, 6),
               .setup = [](OpHarness& h) { pooling_mask(h, 5, 6); },
               .grad_inputs = {0}});

  // Interp (DeepLab v2 / PSPNet): every way of giving the size, cropping, a same-size copy.
  t.push_back({.name = "Interp",
               .layer = "type: 'Interp' interp_param { zoom_factor: 2 }",
               .in = {{2, 3, 4, 5}},
               .oracle = interp(0, 4, 5, 7, 9)});
  t.push_back({.name = "Interp_size",
               .layer = "type: 'Interp' interp_param { height: 6 width: 3 }",
               .in = {{1, 2, 4, 5}},
               .oracle = interp(0, 4, 5, 6, 3)});
  t.push_back({.name = "Interp_shrink",
               .layer = "type: 'Interp' interp_param { shrink_factor: 2 }",
               .in = {{1, 2, 7, 6}},
               .oracle = interp(0, 7, 6, 4, 3)});
  t.push_back({.name = "Interp_shrink_zoom_crop",
               .layer = "type: 'Interp' interp_param { shrink_factor: 2 zoom_factor: 3 pad_beg: -1 pad_end: -1 }",
               .in = {{1, 2, 7, 8}},
               .oracle = interp(1, 5, 6, 7, 7)});
  t.push_back({.name = "Interp_to_one_pixel",
               .layer = "type: 'Interp' interp_param { height: 1 width: 1 }",
               .in = {{2, 2, 3, 4}},
               .oracle = interp(0, 3, 4, 1, 1)});
  t.push_back({.name = "Interp_same_size_crop",
               .layer = "type: 'Interp' interp_param { height: 3 width: 4 pad_end: -1 }",
               .in = {{1, 2, 4, 5}},
               .oracle = interp(0, 3, 4, 3, 4)});
  t.push_back({.name = "Interp_size_of_bottom_1",
               .layer = "type: 'Interp'",
               .in = {{2, 2, 3, 3}, {2, 5, 5, 8}},
               .oracle = interp(0, 3, 3, 5, 8),
               .grad_inputs = {0}});

  t.push_back({.name = "LRN",
               .layer = "type: 'LRN' lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 }",
               .in = {{2, 5, 4, 3}},
               .oracle = lrn(3, 0.5, 0.75, 2, true),
               .grad_tol = 2e-2f});
  t.push_back({.name = "LRN_size5",
               .layer = "type: 'LRN' lrn_param { local_size: 5 alpha: 0.3 beta: 0.6 }",
               .in = {{1, 7, 2, 2}},
               .oracle = lrn(5, 0.3, 0.6, 1, true),
               .grad_tol = 2e-2f});
  t.push_back({.name = "LRN_within",
               .layer = "type: 'LRN' lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL }",
               .in = {{2, 2, 4, 5}},
               .oracle = lrn(3, 0.5, 0.75, 1, false),
               .grad_tol = 2e-2f});

  t.push_back({.name = "BatchNorm",
               .layer = "type: 'BatchNorm'",
               .in = {{3, 2, 2, 2}},
               .oracle = batch_norm(false, 1e-5),
               .grad_tol = 2e-2f});
  t.push_back({.name = "BatchNorm_global",
               .layer = "type: 'BatchNorm' batch_norm_param { use_global_stats: true eps: 0.001 }",
               .in = {{2, 3, 2}},
               .oracle = batch_norm(true, 1e-3),
               .setup = [](OpHarness& h) {
                 for (int c = 0; c < 3; ++c) {
                   h.params[0].f32()[c] = 0.5f * c - 0.4f;  // sums over a normaliser of 2
                   h.params[1].f32()[c] = 0.3f + c;
                 }
                 h.params[2].f32()[0] = 2.f;
               }});
  // The SegNet/ENet forks' BN (scale and shift blobs of shape (1, C, 1, 1)).
  t.push_back({.name = "BN",
               .layer = "type: 'BN' bn_param { scale_filler { type: 'uniform' min: 0.5 max: 1.5 } shift_filler { type: "
                        "'uniform' min: -1 max: 1 } }",
               .in = {{3, 2, 2, 3}},
               .oracle = fork_bn(true),
               .grad_tol = 2e-2f});
  t.push_back({.name = "BN_inference",
               .layer = "type: 'BN' bn_param { bn_mode: INFERENCE scale_filler { type: 'gaussian' } shift_filler { type: "
                        "'constant' value: 0.25 } }",
               .in = {{2, 3, 2, 2}},
               .oracle = fork_bn(false)});
  t.push_back({.name = "Scale",
               .layer = "type: 'Scale' scale_param { bias_term: true }",
               .in = {{2, 3, 2, 2}},
               .oracle = [](const OpHarness& h) {
                 Tensor y(h.in[0].shape());
                 for (int64_t i = 0; i < y.numel(); ++i) {
                   int64_t c = (i / 4) % 3;
                   y.f32()[i] = static_cast<float>(static_cast<double>(h.in[0].f32()[i]) * h.params[0].f32()[c] +
                                                   h.params[1].f32()[c]);
                 }
                 return std::vector<Tensor>{y};
               }});
  t.push_back({.name = "Scale_second_bottom",
               .layer = "type: 'Scale' scale_param { axis: 1 }",
               .in = {{2, 3, 4}, {3, 4}},
               .oracle = [](const OpHarness& h) {
                 Tensor y(h.in[0].shape());
                 for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] = h.in[0].f32()[i] * h.in[1].f32()[i % 12];
                 return std::vector<Tensor>{y};
               }});
  t.push_back({.name = "Bias", .layer = "type: 'Bias'", .in = {{2, 3, 2}}, .oracle = [](const OpHarness& h) {
                 Tensor y(h.in[0].shape());
                 for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] = h.in[0].f32()[i] + h.params[0].f32()[(i / 2) % 3];
                 return std::vector<Tensor>{y};
               }});
  t.push_back(
      {.name = "Bias_second_bottom", .layer = "type: 'Bias'", .in = {{2, 3, 2}, {3}}, .oracle = [](const OpHarness& h) {
         Tensor y(h.in[0].shape());
         for (int64_t i = 0; i < y.numel(); ++i) y.f32()[i] = h.in[0].f32()[i] + h.in[1].f32()[(i / 2) % 3];
         return std::vector<Tensor>{y};
       }});
  auto prelu = [](bool shared) {
    return [shared](const OpHarness& h) {
      Tensor y(h.in[0].shape());
      int64_t c = h.in[0].dim(1), sp = h.in[0].numel() / (h.in[0].dim(0) * c);
      for (int64_t i = 0; i < y.numel(); ++i) {
        float x = h.in[0].f32()[i], a = h.params[0].f32()[shared ? 0 : (i / sp) % c];
        y.f32()[i] = x > 0 ? x : a * x;
      }
      return std::vector<Tensor>{y};
    };
  };
  t.push_back(
      {.name = "PReLU", .layer = "type: 'PReLU'", .in = {{2, 3, 2, 2}}, .oracle = prelu(false), .setup = off_zero});
  t.push_back({.name = "PReLU_shared",
               .layer = "type: 'PReLU' prelu_param { channel_shared: true }",
               .in = {{2, 3, 2}},
               .oracle = prelu(true),
               .setup = off_zero});

  // Dropout keeps element i where uniform01(stream_key(seed, layer name, step), i) >= ratio
  // (the mask is a pure function of those, so resumed runs drop the same units).
  t.push_back({.name = "Dropout",
               .layer = "name: 'drop' type: 'Dropout' dropout_param { dropout_ratio: 0.3 }",
               .in = {{4, 25}},
               .oracle = [](const OpHarness& h) {
                 Tensor y(h.in[0].shape());
                 uint64_t key = stream_key(kHarnessSeed, "drop", 0);
                 for (int64_t i = 0; i < y.numel(); ++i)
                   y.f32()[i] = uniform01(key, static_cast<uint64_t>(i)) >= 0.3f ? h.in[0].f32()[i] / 0.7f : 0.f;
                 return std::vector<Tensor>{y};
               }});
  t.push_back({.name = "Dropout_inference",
               .layer = "type: 'Dropout' dropout_param { dropout_ratio: 0.3 }",
               .in = {{4, 5}},
               .oracle = copies({4, 5}),
               .no_gradient = "TEST phase passes data through and builds no mask; the TRAIN case checks gradients",
               .phase = proto::TEST});

  // XNOR-Net: Binarize (its backward is the straight-through estimator), and the binary
  // layers deploy makes, with enough channels for several words a tap and for the vector
  // popcount, padding, stride and dilation, and a transposed inner product.
  t.push_back({.name = "Binarize",
               .layer = "type: 'Binarize'",
               .in = {{2, 3, 4, 5}},
               .oracle = [](const OpHarness& h) { return std::vector<Tensor>{signs_of(h.in[0])}; },
               .no_gradient = "a step function: its backward is the straight-through estimator (hard tanh's), "
                              "which test_compression checks (finite differences would say 0)",
               .lo = -2,
               .hi = 2,
               .setup = off_zero});
  {
    const char* const kInference = "inference only (bakusoku deploy makes it): no backward";
    ConvSpec a{5, 3, 3, 2, 2, 1, 1, 1, 1, 1, true};
    t.push_back({.name = "BinaryConvolution",
                 .layer = conv_layer("BinaryConvolution", a),
                 .in = {{2, 70, 7, 6}},
                 .oracle = binary_convolution(a),
                 .no_gradient = kInference,
                 .phase = proto::TEST,
                 .fwd_tol = 1e-4f});
    ConvSpec b{3, 5, 3, 1, 1, 2, 1, 2, 1, 1, false};
    t.push_back({.name = "BinaryConvolution_dilation_nobias",
                 .layer = conv_layer("BinaryConvolution", b),
                 .in = {{1, 3, 9, 8}},
                 .oracle = binary_convolution(b),
                 .no_gradient = kInference,
                 .phase = proto::TEST,
                 .fwd_tol = 1e-4f});
    t.push_back({.name = "BinaryInnerProduct",
                 .layer = "type: 'BinaryInnerProduct' inner_product_param { num_output: 7 }",
                 .in = {{3, 10, 6, 10}},
                 .oracle = binary_inner_product(7, false),
                 .no_gradient = kInference,
                 .phase = proto::TEST,
                 .fwd_tol = 1e-4f});
    t.push_back({.name = "BinaryInnerProduct_transpose",
                 .layer = "type: 'BinaryInnerProduct' inner_product_param { num_output: 5 transpose: true }",
                 .in = {{2, 70}},
                 .oracle = binary_inner_product(5, true),
                 .no_gradient = kInference,
                 .phase = proto::TEST,
                 .fwd_tol = 1e-4f});
  }

  // FakeQuant with a trained range (TEST phase keeps it): x rounded to 127 steps per side of
  // [-0.6, 0.6], clipped outside.
  t.push_back(
      {.name = "FakeQuant",
       .layer = "type: 'FakeQuant'",
       .in = {{3, 4, 5}},
       .oracle =
           [](const OpHarness& h) {
             Tensor y(h.in[0].shape());
             for (int64_t i = 0; i < y.numel(); ++i)
               y.f32()[i] = static_cast<float>(
                   std::clamp(std::nearbyint(static_cast<double>(h.in[0].f32()[i]) * 127 / 0.6), -127.0, 127.0) *
                   (0.6f / 127.f));
             return std::vector<Tensor>{y};
           },
       .no_gradient = "a step function: its backward is the straight-through estimator, which "
                      "test_compression checks (finite differences would say 0)",
       .phase = proto::TEST,
       .setup = [](OpHarness& h) { h.params[0].f32()[0] = 0.6f; }});

  // DistillationLoss at T = 2: T^2 x the mean over items of KL(softmax(b1 / T) || softmax(b0 / T)).
  t.push_back({.name = "DistillationLoss",
               .layer = "type: 'DistillationLoss' distillation_param { temperature: 2 }",
               .in = {{3, 4}, {3, 4}},
               .oracle =
                   [](const OpHarness& h) {
                     double kl = 0;
                     for (int64_t n = 0; n < 3; ++n) {
                       double zs = 0, zt = 0;
                       for (int64_t k = 0; k < 4; ++k) {
                         zs += std::exp(h.in[0].f32()[n * 4 + k] / 2.0);
                         zt += std::exp(h.in[1].f32()[n * 4 + k] / 2.0);
                       }
                       for (int64_t k = 0; k < 4; ++k) {
                         const double ps = std::exp(h.in[0].f32()[n * 4 + k] / 2.0) / zs;
                         const double pt = std::exp(h.in[1].f32()[n * 4 + k] / 2.0) / zt;
                         kl += pt * std::log(pt / ps);
                       }
                     }
                     Tensor y(Shape{});
                     y.f32()[0] = static_cast<float>(4 * kl / 3);
                     return std::vector<Tensor>{y};
                   },
               .lo = -3.f,
               .hi = 3.f,
               .grad_inputs = {0}});

  // Eltwise: inputs of MAX are kept 0.1 apart (no ties within a step).
  t.push_back({.name = "Eltwise_sum",
               .layer = "type: 'Eltwise' eltwise_param { operation: SUM coeff: 2 coeff: -1 }",
               .in = {{2, 3}, {2, 3}},
               .oracle = [](const OpHarness& h) {
                 Tensor y({2, 3});
                 for (int i = 0; i < 6; ++i) y.f32()[i] = 2 * h.in[0].f32()[i] - h.in[1].f32()[i];
                 return std::vector<Tensor>{y};
               }});
  t.push_back({.name = "Eltwise_prod",
               .layer = "type: 'Eltwise' eltwise_param { operation: PROD }",
               .in = {{2, 3}, {2, 3}, {2, 3}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({2, 3});
                     for (int i = 0; i < 6; ++i)
                       y.f32()[i] = static_cast<float>(static_cast<double>(h.in[0].f32()[i]) * h.in[1].f32()[i] *
                                                       h.in[2].f32()[i]);
                     return std::vector<Tensor>{y};
                   },
               .setup = off_zero});
  t.push_back({.name = "Eltwise_max",
               .layer = "type: 'Eltwise' eltwise_param { operation: MAX }",
               .in = {{2, 3}, {2, 3}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({2, 3});
                     for (int i = 0; i < 6; ++i) y.f32()[i] = std::max(h.in[0].f32()[i], h.in[1].f32()[i]);
                     return std::vector<Tensor>{y};
                   },
               .setup =
                   [](OpHarness& h) {
                     for (int i = 0; i < 6; ++i) h.in[1].f32()[i] = h.in[0].f32()[i] + (i % 2 ? 0.1f : -0.1f);
                   }});

  // Data movement.
  t.push_back({.name = "Flatten", .layer = "type: 'Flatten'", .in = {{2, 3, 4, 5}}, .oracle = copies({2, 60})});
  t.push_back({.name = "Reshape",
               .layer = "type: 'Reshape' reshape_param { shape { dim: 0 dim: -1 dim: 2 } }",
               .in = {{2, 3, 4}},
               .oracle = copies({2, 6, 2})});
  t.push_back({.name = "Split", .layer = "type: 'Split'", .in = {{3, 4}}, .oracle = copies({3, 4}, 2), .outputs = 2});
  t.push_back({.name = "Concat",
               .layer = "type: 'Concat' concat_param { axis: 1 }",
               .in = {{2, 3, 2}, {2, 1, 2}},
               .oracle = [](const OpHarness& h) {
                 Tensor y({2, 4, 2});
                 for (int n = 0; n < 2; ++n)
                   for (int c = 0; c < 4; ++c)
                     for (int i = 0; i < 2; ++i)
                       y.f32()[(n * 4 + c) * 2 + i] =
                           c < 3 ? h.in[0].f32()[(n * 3 + c) * 2 + i] : h.in[1].f32()[n * 2 + i];
                 return std::vector<Tensor>{y};
               }});
  t.push_back({.name = "Slice",
               .layer = "type: 'Slice' slice_param { axis: 1 slice_point: 1 slice_point: 3 }",
               .in = {{2, 5}},
               .oracle =
                   [](const OpHarness& h) {
                     std::vector<Tensor> out{Tensor({2, 1}), Tensor({2, 2}), Tensor({2, 2})};
                     int64_t begin[] = {0, 1, 3};
                     for (int k = 0; k < 3; ++k)
                       for (int n = 0; n < 2; ++n)
                         for (int64_t j = 0; j < out[k].dim(1); ++j)
                           out[k].f32()[n * out[k].dim(1) + j] = h.in[0].f32()[n * 5 + begin[k] + j];
                     return out;
                   },
               .outputs = 3});
  t.push_back({.name = "Crop",
               .layer = "type: 'Crop' crop_param { axis: 2 offset: 1 offset: 2 }",
               .in = {{2, 2, 5, 6}, {2, 2, 3, 3}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({2, 2, 3, 3});
                     for (int n = 0; n < 2; ++n)
                       for (int c = 0; c < 2; ++c)
                         for (int i = 0; i < 3; ++i)
                           for (int j = 0; j < 3; ++j)
                             y.f32()[((n * 2 + c) * 3 + i) * 3 + j] = at4(h.in[0], n, c, i + 1, j + 2);
                     return std::vector<Tensor>{y};
                   },
               .grad_inputs = {0}});

  // Reductions: (outer = axes before `axis`) x (the rest), times coeff.
  auto reduction = [&](const char* name, const char* op, int axis, Shape in) {
    std::string o = op;
    t.push_back(
        {.name = name,
         .layer = fmt::format("type: 'Reduction' reduction_param {{ operation: {} axis: {} coeff: 0.5 }}", op, axis),
         .in = {in},
         .oracle =
             [o, axis](const OpHarness& h) {
               const Tensor& x = h.in[0];
               int64_t outer = shape_count(x.shape(), 0, axis), dim = x.numel() / outer;
               Tensor y(Shape(x.shape().begin(), x.shape().begin() + axis));
               for (int64_t i = 0; i < outer; ++i) {
                 double s = 0;
                 for (int64_t j = 0; j < dim; ++j) {
                   double v = x.f32()[i * dim + j];
                   s += o == "ASUM" ? std::fabs(v) : o == "SUMSQ" ? v * v : v;
                 }
                 y.f32()[i] = static_cast<float>(0.5 * (o == "MEAN" ? s / static_cast<double>(dim) : s));
               }
               return std::vector<Tensor>{y};
             },
         .setup = off_zero});
  };
  reduction("Reduction", "SUM", 1, {3, 4, 2});
  reduction("Reduction_asum", "ASUM", 1, {3, 4, 2});
  reduction("Reduction_sumsq", "SUMSQ", 2, {3, 4, 2});
  reduction("Reduction_mean_all", "MEAN", 0, {2, 3});

  // Softmax and losses.
  t.push_back({.name = "Softmax", .layer = "type: 'Softmax'", .in = {{3, 4, 2}}, .oracle = [](const OpHarness& h) {
                 return std::vector<Tensor>{softmax_of(h.in[0])};
               }});
  t.push_back({.name = "SoftmaxWithLoss",
               .layer = "type: 'SoftmaxWithLoss'",
               .in = {{5, 4}, {5}},
               .oracle = softmax_loss(-1),
               .setup = labels(1, 4),
               .grad_inputs = {0}});
  t.push_back({.name = "SoftmaxWithLoss_spatial_ignore",
               .layer = "type: 'SoftmaxWithLoss' loss_param { ignore_label: 2 }",
               .in = {{2, 3, 2, 2}, {2, 1, 2, 2}},
               .oracle = softmax_loss(2),
               .setup = labels(1, 3, 3, 2),
               .grad_inputs = {0}});
  t.push_back({.name = "SoftmaxWithLoss_segnet_class_weighting",
               .layer = "type: 'SoftmaxWithLoss' loss_param { weight_by_label_freqs: true ignore_label: 9 "
                        "class_weighting: 0.25 class_weighting: 4 class_weighting: 1.5 class_weighting: 0.5 }",
               .in = {{2, 4, 2, 3}, {2, 1, 2, 3}},
               .oracle = softmax_loss(9, {0.25, 4, 1.5, 0.5}),
               .setup = labels(1, 4, 5, 9),
               .grad_inputs = {0}});
  t.push_back({.name = "EuclideanLoss",
               .layer = "type: 'EuclideanLoss'",
               .in = {{3, 4}, {3, 4}},
               .oracle = [](const OpHarness& h) {
                 double s = 0;
                 for (int i = 0; i < 12; ++i)
                   s += std::pow(static_cast<double>(h.in[0].f32()[i]) - h.in[1].f32()[i], 2);
                 return std::vector<Tensor>{scalar(s / 3 / 2)};
               }});
  t.push_back({.name = "SigmoidCrossEntropyLoss",
               .layer = "type: 'SigmoidCrossEntropyLoss'",
               .in = {{2, 3}, {2, 3}},
               .oracle =
                   [](const OpHarness& h) {
                     double s = 0;
                     for (int i = 0; i < 6; ++i) {
                       double p = sigmoid(h.in[0].f32()[i]), y = h.in[1].f32()[i];
                       s -= y * std::log(p) + (1 - y) * std::log(1 - p);
                     }
                     return std::vector<Tensor>{scalar(s / 2)};
                   },
               .setup = labels(1, 2),
               .grad_inputs = {0}});
  t.push_back({.name = "Accuracy",
               .layer = "type: 'Accuracy' accuracy_param { top_k: 2 }",
               .in = {{6, 4}, {6}},
               .oracle = accuracy(2),
               .no_gradient = kNoBackward,
               .outputs = 2,
               .phase = proto::TEST,
               .setup = labels(1, 4)});
  t.push_back({.name = "ArgMax",
               .layer = "type: 'ArgMax' argmax_param { top_k: 2 out_max_val: true }",
               .in = {{3, 5}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({3, 2, 2});  // per item: the top 2 indices, then their values
                     for (int n = 0; n < 3; ++n) {
                       std::vector<int64_t> r = ranking(h.in[0].f32() + n * 5, 5, 1);
                       for (int j = 0; j < 2; ++j) {
                         y.f32()[n * 4 + j] = static_cast<float>(r[j]);
                         y.f32()[n * 4 + 2 + j] = h.in[0].f32()[n * 5 + r[j]];
                       }
                     }
                     return std::vector<Tensor>{y};
                   },
               .no_gradient = kNoBackward});
  t.push_back({.name = "ArgMax_axis",
               .layer = "type: 'ArgMax' argmax_param { top_k: 2 axis: 1 }",
               .in = {{2, 4, 3}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({2, 2, 3});
                     for (int n = 0; n < 2; ++n)
                       for (int i = 0; i < 3; ++i) {
                         std::vector<int64_t> r = ranking(h.in[0].f32() + n * 12 + i, 4, 3);
                         for (int j = 0; j < 2; ++j) y.f32()[(n * 2 + j) * 3 + i] = static_cast<float>(r[j]);
                       }
                     return std::vector<Tensor>{y};
                   },
               .no_gradient = kNoBackward});
  t.push_back({.name = "Embed",
               .layer = "type: 'Embed' embed_param { num_output: 3 input_dim: 5 }",
               .in = {{4}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({4, 3});
                     for (int i = 0; i < 4; ++i)
                       for (int j = 0; j < 3; ++j)
                         y.f32()[i * 3 + j] =
                             h.params[0].f32()[static_cast<int>(h.in[0].f32()[i]) * 3 + j] + h.params[1].f32()[j];
                     return std::vector<Tensor>{y};
                   },
               .setup =
                   [](OpHarness& h) {
                     float idx[] = {0, 4, 2, 4};
                     std::copy(idx, idx + 4, h.in[0].f32());
                   },
               .grad_inputs = {-1},  // the input holds indices; the table's gradient is checked
               .step = 1e-2f});

  // The remaining BVLC layers: pair and classification losses, Tile, BatchReindex,
  // Parameter, Im2col, SPP.
  auto contrastive = [&](const char* name, bool legacy) {
    t.push_back(
        {.name = name,
         .layer =
             fmt::format("type: 'ContrastiveLoss' contrastive_loss_param {{ margin: 3 legacy_version: {} }}", legacy),
         .in = {{4, 3}, {4, 3}, {4}},
         .oracle =
             [legacy](const OpHarness& h) {
               double loss = 0;
               for (int i = 0; i < 4; ++i) {
                 double sq = 0;
                 for (int k = 0; k < 3; ++k)
                   sq += std::pow(static_cast<double>(h.in[0].f32()[i * 3 + k]) - h.in[1].f32()[i * 3 + k], 2);
                 bool similar = h.in[2].f32()[i] != 0.f;
                 loss += similar ? sq : legacy ? std::max(3 - sq, 0.0) : std::pow(std::max(3 - std::sqrt(sq), 0.0), 2);
               }
               return std::vector<Tensor>{scalar(loss / 4 / 2)};
             },
         .setup = labels(2, 2),
         .grad_inputs = {0, 1}});
  };
  contrastive("ContrastiveLoss", false);
  contrastive("ContrastiveLoss_legacy", true);
  t.push_back({.name = "InfogainLoss",
               .layer = "type: 'InfogainLoss'",
               .in = {{3, 4}, {3}, {4, 4}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor p = softmax_of(h.in[0]);
                     double loss = 0;
                     for (int n = 0; n < 3; ++n) {
                       auto y = static_cast<int>(h.in[1].f32()[n]);
                       for (int l = 0; l < 4; ++l) loss -= h.in[2].f32()[y * 4 + l] * std::log(p.f32()[n * 4 + l]);
                     }
                     return std::vector<Tensor>{scalar(loss / 3)};
                   },
               .setup = labels(1, 4),
               .grad_inputs = {0}});
  t.push_back({.name = "MultinomialLogisticLoss",
               .layer = "type: 'MultinomialLogisticLoss'",
               .in = {{4, 3}, {4}},
               .oracle =
                   [](const OpHarness& h) {
                     double loss = 0;
                     for (int n = 0; n < 4; ++n)
                       loss -= std::log(h.in[0].f32()[n * 3 + static_cast<int>(h.in[1].f32()[n])]);
                     return std::vector<Tensor>{scalar(loss / 4)};
                   },
               .lo = 0.2f,
               .setup = labels(1, 3),
               .grad_inputs = {0}});
  auto hinge = [&](const char* name, bool l2) {
    t.push_back({.name = name,
                 .layer = fmt::format("type: 'HingeLoss' hinge_loss_param {{ norm: {} }}", l2 ? "L2" : "L1"),
                 .in = {{3, 4}, {3}},
                 .oracle =
                     [l2](const OpHarness& h) {
                       double loss = 0;
                       for (int n = 0; n < 3; ++n)
                         for (int j = 0; j < 4; ++j) {
                           double t = j == static_cast<int>(h.in[1].f32()[n]) ? -1 : 1;
                           double m = std::max(0.0, 1 + t * h.in[0].f32()[n * 4 + j]);
                           loss += l2 ? m * m : m;
                         }
                       return std::vector<Tensor>{scalar(loss / 3)};
                     },
                 .lo = -0.9f,  // inside the hinges' kinks at +-1
                 .hi = 0.9f,
                 .setup = labels(1, 4),
                 .grad_inputs = {0}});
  };
  hinge("HingeLoss", false);
  hinge("HingeLoss_L2", true);
  t.push_back({.name = "Tile",
               .layer = "type: 'Tile' tile_param { axis: 1 tiles: 3 }",
               .in = {{2, 2, 3}},
               .oracle = [](const OpHarness& h) {
                 Tensor y({2, 6, 3});
                 for (int o = 0; o < 2; ++o)
                   for (int r = 0; r < 6; ++r)
                     for (int i = 0; i < 3; ++i) y.f32()[(o * 6 + r) * 3 + i] = h.in[0].f32()[(o * 2 + r % 2) * 3 + i];
                 return std::vector<Tensor>{y};
               }});
  // ShuffleChannel (the ShuffleNet forks): output channel k * group + r is input channel
  // r * (C / group) + k.
  auto shuffled = [](int64_t group) {
    return [group](const OpHarness& h) {
      const Tensor& x = h.in[0];
      int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / (n * c), cols = c / group;
      Tensor y(x.shape());
      for (int64_t b = 0; b < n; ++b)
        for (int64_t r = 0; r < group; ++r)
          for (int64_t k = 0; k < cols; ++k)
            for (int64_t i = 0; i < sp; ++i)
              y.f32()[(b * c + k * group + r) * sp + i] = x.f32()[(b * c + r * cols + k) * sp + i];
      return std::vector<Tensor>{y};
    };
  };
  t.push_back({.name = "ShuffleChannel",
               .layer = "type: 'ShuffleChannel' shuffle_channel_param { group: 3 }",
               .in = {{2, 6, 2, 3}},
               .oracle = shuffled(3)});
  t.push_back({.name = "ShuffleChannel_group2_3d",
               .layer = "type: 'ShuffleChannel' shuffle_channel_param { group: 2 }",
               .in = {{3, 8, 5}},
               .oracle = shuffled(2)});
  // Axpy (the SENet fork): a[n][c] * x + y.
  auto axpy = [](const OpHarness& h) {
    const Tensor &a = h.in[0], &x = h.in[1], &y = h.in[2];
    int64_t planes = x.dim(0) * x.dim(1), sp = x.numel() / planes;
    Tensor out(x.shape());
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < sp; ++i)
        out.f32()[p * sp + i] =
            static_cast<float>(static_cast<double>(a.f32()[p]) * x.f32()[p * sp + i] + y.f32()[p * sp + i]);
    return std::vector<Tensor>{out};
  };
  t.push_back(
      {.name = "Axpy", .layer = "type: 'Axpy'", .in = {{2, 3, 1, 1}, {2, 3, 4, 5}, {2, 3, 4, 5}}, .oracle = axpy});
  t.push_back({.name = "Axpy_2d_scale", .layer = "type: 'Axpy'", .in = {{2, 4}, {2, 4, 3}, {2, 4, 3}}, .oracle = axpy});
  t.push_back({.name = "BatchReindex",
               .layer = "type: 'BatchReindex'",
               .in = {{3, 2}, {4}},
               .oracle =
                   [](const OpHarness& h) {
                     Tensor y({4, 2});
                     for (int i = 0; i < 4; ++i)
                       for (int k = 0; k < 2; ++k)
                         y.f32()[i * 2 + k] = h.in[0].f32()[static_cast<int>(h.in[1].f32()[i]) * 2 + k];
                     return std::vector<Tensor>{y};
                   },
               .setup =
                   [](OpHarness& h) {
                     float idx[] = {2, 0, 2, 1};
                     std::copy(idx, idx + 4, h.in[1].f32());
                   },
               .grad_inputs = {0}});
  // Filter at its planned batch: every item selected (the selector's NaN and negative values
  // count as selected, as in Caffe). Smaller batches change shapes as the net runs, which the
  // executor does: Net.Filter* in test_net.cc.
  t.push_back({.name = "Filter",
               .layer = "type: 'Filter'",
               .in = {{4, 2, 3}, {4}, {4, 1}},
               .oracle = [](const OpHarness& h) { return std::vector<Tensor>{h.in[0].clone(), h.in[1].clone()}; },
               .outputs = 2,
               .setup =
                   [](OpHarness& h) {
                     float sel[] = {1.f, -2.f, std::nanf(""), 0.5f};
                     std::copy(sel, sel + 4, h.in[2].f32());
                   },
               .grad_inputs = {0, 1}});
  t.push_back({.name = "Parameter",
               .layer = "type: 'Parameter' parameter_param { shape { dim: 2 dim: 3 } }",
               .oracle = [](const OpHarness& h) { return std::vector<Tensor>{h.params[0].clone()}; }});
  t.push_back({.name = "Im2col",
               .layer = "type: 'Im2col' convolution_param { kernel_size: 2 stride: 2 pad: 1 }",
               .in = {{1, 2, 3, 4}},
               .oracle = [](const OpHarness& h) {
                 Tensor y({1, 8, 2, 3});  // (c, i, j) channels; 2x3 positions
                 for (int c = 0; c < 2; ++c)
                   for (int i = 0; i < 2; ++i)
                     for (int j = 0; j < 2; ++j)
                       for (int oy = 0; oy < 2; ++oy)
                         for (int ox = 0; ox < 3; ++ox) {
                           int iy = oy * 2 - 1 + i, ix = ox * 2 - 1 + j;
                           bool in = iy >= 0 && ix >= 0 && iy < 3 && ix < 4;
                           y.f32()[(((c * 2 + i) * 2 + j) * 2 + oy) * 3 + ox] = in ? at4(h.in[0], 0, c, iy, ix) : 0.f;
                         }
                 return std::vector<Tensor>{y};
               }});
  // SPP: each level is Caffe's Pooling with the level's window (the Pooling oracle above),
  // flattened per item and joined.
  auto spp = [&](const char* name, bool max) {
    t.push_back(
        {.name = name,
         .layer = fmt::format("type: 'SPP' spp_param {{ pyramid_height: 3 pool: {} }}", max ? "MAX" : "AVE"),
         .in = {{2, 2, 9, 7}},
         .oracle =
             [max](const OpHarness& h) {
               std::vector<std::vector<float>> items(2);
               for (int64_t bins : {1, 2, 4}) {
                 auto k_of = [&](int64_t in) { return (in + bins - 1) / bins; };
                 int64_t kh = k_of(9), kw = k_of(7);
                 Tensor lv = pooling({max, kh, kw, kh, kw, (kh * bins - 9 + 1) / 2, (kw * bins - 7 + 1) / 2})(h)[0];
                 int64_t per = lv.numel() / 2;
                 for (int n = 0; n < 2; ++n)
                   items[n].insert(items[n].end(), lv.f32() + n * per, lv.f32() + (n + 1) * per);
               }
               Tensor y({2, static_cast<int64_t>(items[0].size())});
               std::copy(items[0].begin(), items[0].end(), y.f32());
               std::copy(items[1].begin(), items[1].end(), y.f32() + items[0].size());
               return std::vector<Tensor>{y};
             },
         .setup = max ? Setup(distinct_input) : Setup()});
  };
  spp("SPP", true);
  spp("SPP_ave", false);

  // Exemptions: ops with nothing for an oracle to predict.
  t.push_back({.name = "Silence",
               .layer = "type: 'Silence'",
               .in = {{2, 3}},
               .no_oracle = "has no outputs: it only consumes its inputs",
               .no_gradient = kNoBackward,
               .outputs = 0});
  t.push_back({.name = "Input",
               .layer = "type: 'Input' input_param { shape { dim: 2 dim: 3 } }",
               .no_oracle = "filled by the caller: its kernel computes nothing",
               .no_gradient = "a graph input: no backward pass"});
  t.push_back({.name = "Data",
               .layer = "type: 'Data' data_param { source: 'train-images-idx3-ubyte' batch_size: 4 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt});
  t.push_back({.name = "HDF5Data",
               .layer = "type: 'HDF5Data' hdf5_data_param { source: 'list.txt' batch_size: 4 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt});
  t.push_back({.name = "Data_lmdb_force_gray",
               .layer = "type: 'Data' data_param { source: 'train_lmdb' batch_size: 4 backend: LMDB rand_skip: 2 } "
                        "transform_param { force_gray: true crop_size: 3 mean_value: 1 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt,
               .outputs = 2});
  t.push_back({.name = "ImageData",
               .layer = "type: 'ImageData' image_data_param { source: 'list.txt' batch_size: 4 new_height: 8 "
                        "new_width: 6 is_color: false shuffle: true root_folder: 'imgs/' rand_skip: 3 } "
                        "transform_param { scale: 0.5 mirror: true crop_size: 4 mean_value: 1 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt,
               .outputs = 2});
  t.push_back({.name = "WindowData",
               .layer = "type: 'WindowData' window_data_param { source: 'windows.txt' batch_size: 8 fg_threshold: 0.6 "
                        "bg_threshold: 0.3 fg_fraction: 0.5 context_pad: 2 crop_mode: 'square' cache_images: true "
                        "root_folder: 'imgs/' scale: 0.5 } transform_param { mirror: true crop_size: 12 "
                        "mean_value: 1 mean_value: 2 mean_value: 3 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt,
               .outputs = 2});
  t.push_back({.name = "DenseImageData",
               .layer = "type: 'DenseImageData' dense_image_data_param { source: 'pairs.txt' batch_size: 2 "
                        "rand_skip: 1 shuffle: true new_height: 8 new_width: 10 is_color: false root_folder: 'imgs/' "
                        "mirror: true crop_height: 4 crop_width: 6 } transform_param { scale: 0.5 mean_value: 7 }",
               .no_oracle = kDataExempt,
               .no_gradient = kDataExempt,
               .outputs = 2});
  t.push_back({.name = "TextData",
               .layer = "type: 'TextData' text_data_param { source: 'fortunes/*.txt' batch_size: 8 seq_len: 25 "
                        "holdout: 0.1 read_holdout: true vocabulary: 'chars.txt' vocabulary_size: 96 }",
               .no_oracle = "reads a text file (no computation to check against an oracle); its batches are tested "
                            "in test_formats_text",
               .no_gradient = kDataExempt,
               .outputs = 3});
  t.push_back({.name = "MemoryData",
               .layer = "type: 'MemoryData' memory_data_param { batch_size: 2 channels: 3 height: 4 width: 5 }",
               .no_oracle = "filled by the caller: its kernel computes nothing",
               .no_gradient = "a graph input: no backward pass",
               .outputs = 2});

  // The SSD fork's layers (oracles shared with tests/test_ops_detection.cc where long).
  auto permuted = [](std::vector<int> order) {
    return [order](const OpHarness& h) {
      const Shape& is = h.in[0].shape();
      const int nd = static_cast<int>(is.size());
      Shape os;
      for (int o : order) os.push_back(is[o]);
      Tensor y(os);
      std::vector<int64_t> idx(nd, 0);  // output multi-index
      for (int64_t i = 0; i < y.numel(); ++i) {
        int64_t rem = i, src = 0;
        for (int j = nd - 1; j >= 0; --j) {
          idx[j] = rem % os[j];
          rem /= os[j];
        }
        for (int a = 0; a < nd; ++a) {
          int j = static_cast<int>(std::find(order.begin(), order.end(), a) - order.begin());
          src = src * is[a] + idx[j];
        }
        y.f32()[i] = h.in[0].f32()[src];
      }
      return std::vector<Tensor>{y};
    };
  };
  t.push_back({.name = "Permute",
               .layer = "type: 'Permute' permute_param { order: 0 order: 2 order: 3 order: 1 }",
               .in = {{2, 3, 4, 5}},
               .oracle = permuted({0, 2, 3, 1})});
  t.push_back({.name = "Permute_partial_order",
               .layer = "type: 'Permute' permute_param { order: 1 }",
               .in = {{3, 2, 4}},
               .oracle = permuted({1, 0, 2})});
  auto normalized = [](bool across, bool shared) {
    return [=](const OpHarness& h) {
      const Tensor& x = h.in[0];
      const int64_t n = x.dim(0), c = x.dim(1), sp = x.numel() / (n * c);
      Tensor y(x.shape());
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < sp; ++i) {
          double sum = 1e-10;
          for (int64_t k = 0; k < c; ++k)
            for (int64_t j = across ? 0 : i; j < (across ? sp : i + 1); ++j)
              sum += std::pow(static_cast<double>(x.f32()[(b * c + k) * sp + j]), 2);
          for (int64_t k = 0; k < c; ++k) {
            const int64_t o = (b * c + k) * sp + i;
            y.f32()[o] = static_cast<float>(h.params[0].f32()[shared ? 0 : k] * x.f32()[o] / std::sqrt(sum));
          }
        }
      return std::vector<Tensor>{y};
    };
  };
  t.push_back(
      {.name = "Normalize", .layer = "type: 'Normalize'", .in = {{2, 3, 2, 3}}, .oracle = normalized(true, true)});
  t.push_back({.name = "Normalize_per_position_channel_scale",
               .layer = "type: 'Normalize' norm_param { across_spatial: false channel_shared: false }",
               .in = {{2, 4, 3, 2}},
               .oracle = normalized(false, false)});
  PriorSpec prior;
  prior.min_size = {8};
  prior.max_size = {14};
  prior.aspect_ratio = {2, 3};
  prior.variance = {0.1, 0.1, 0.2, 0.2};
  t.push_back(
      {.name = "PriorBox",
       .layer = prior_box_layer(prior),
       .in = {{1, 2, 3, 4}, {1, 3, 24, 32}},
       .oracle = [prior](const OpHarness&) { return std::vector<Tensor>{naive_prior_box(prior, 3, 4, 24, 32)}; },
       .no_gradient = kNoBackward});
  PriorSpec fixed = prior;
  fixed.img_h = fixed.img_w = 20;
  fixed.step_h = fixed.step_w = 7;
  fixed.clip = true;
  t.push_back({.name = "PriorBox_given_image_size",
               .layer = prior_box_layer(fixed),
               .in = {{2, 2, 3, 3}},
               .oracle = [fixed](const OpHarness&) { return std::vector<Tensor>{naive_prior_box(fixed, 3, 3, 0, 0)}; },
               .no_gradient = kNoBackward});
  // DetectionOutput over PriorBox's boxes (the fixed 3 x 3 map: 54 priors) and scores in [0, 1].
  auto detect = [&](const char* name, DetSpec d) {
    const int64_t priors = 54, loc = priors * (d.share_location ? 1 : d.num_classes) * 4;
    t.push_back({.name = name,
                 .layer = detection_output_layer(d),
                 .in = {{2, loc}, {2, priors * d.num_classes}, {1, 2, priors * 4}},
                 .oracle =
                     [d](const OpHarness& h) {
                       return std::vector<Tensor>{
                           padded_detections(naive_detections(h.in[0], h.in[1], h.in[2], d), h.out[0].dim(2))};
                     },
                 .no_gradient = kNoBackward,
                 .phase = proto::TEST,
                 .setup =
                     [fixed](OpHarness& h) {
                       h.in[2].copy_from(naive_prior_box(fixed, 3, 3, 0, 0));
                       for (int64_t i = 0; i < h.in[1].numel(); ++i) h.in[1].f32()[i] = 0.5f * (h.in[1].f32()[i] + 1);
                     }});
  };
  DetSpec shared;
  shared.num_classes = 3;
  shared.nms_threshold = 0.45;
  shared.top_k = 20;
  shared.keep_top_k = 10;
  shared.has_confidence_threshold = true;
  shared.confidence_threshold = 0.3;
  shared.code_type = "CENTER_SIZE";
  detect("DetectionOutput", shared);
  DetSpec per_class;
  per_class.num_classes = 3;
  per_class.share_location = false;
  per_class.background_label_id = 2;
  per_class.nms_threshold = 0.5;
  per_class.eta = 0.9;
  detect("DetectionOutput_per_class_locations", per_class);
  return t;
}

const std::vector<SweepCase>& sweep_cases() {
  static const std::vector<SweepCase> cases = build_cases();
  return cases;
}

std::string type_of(const SweepCase& c) {
  proto::LayerParameter p;
  parse_prototxt_string(c.layer, c.name, p);
  return p.type();
}

// The type's reference kernel: "reference" or "loops" at kReferencePriority ("" if none).
std::string reference_kernel(const std::string& type) {
  for (const KernelRegistry::Entry* e : KernelRegistry::get().entries(type))
    if (e->device == DeviceKind::cpu && e->priority == kReferencePriority &&
        (e->name == "reference" || e->name == "loops"))
      return e->name;
  return "";
}

// The harness for a case running `kernel`, with the case's inputs.
std::unique_ptr<OpHarness> harness(const SweepCase& c, const std::string& kernel) {
  auto h = std::make_unique<OpHarness>(c.layer, c.in, c.phase, c.outputs, std::function<void(Kernel&)>{}, kernel);
  h->randomize_inputs(c.lo, c.hi);
  if (c.setup) c.setup(*h);
  return h;
}

// ---- The registry against the table ----

TEST(OpSweep, EveryTypeHasACase) {
  for (const std::string& type : OpDefRegistry::get().types()) {
    bool found =
        std::any_of(sweep_cases().begin(), sweep_cases().end(), [&](const SweepCase& c) { return type_of(c) == type; });
    EXPECT_TRUE(found) << "op type '" << type << "' is registered but has no case in tests/test_op_sweep.cc: add one "
                       << "to build_cases() (an oracle and a gradient check, or an exemption with its reason)";
  }
}

TEST(OpSweep, EveryCaseIsARegisteredType) {
  for (const SweepCase& c : sweep_cases())
    EXPECT_NE(OpDefRegistry::get().find(type_of(c)), nullptr) << "case " << c.name << ": no op type " << type_of(c);
}

TEST(OpSweep, EveryTypeHasAReferenceKernel) {
  for (const std::string& type : OpDefRegistry::get().types())
    EXPECT_NE(reference_kernel(type), "") << "op type '" << type << "' has no CPU kernel named \"reference\" or "
                                          << "\"loops\" at kReferencePriority";
}

TEST(OpSweep, ExemptionsSayWhy) {
  for (const SweepCase& c : sweep_cases()) {
    EXPECT_EQ(!c.oracle, !c.no_oracle.empty()) << c.name << ": an oracle, or a reason for having none";
    EXPECT_FALSE(c.name.empty());
  }
}

// The reference kernels compute fp32 without post-ops: nodes deploy fused, quantized or
// switched to bf16 go to the oneDNN kernels, which are registered for all three precisions.
TEST(OpSweep, ReferenceKernelsRejectDeployOnlyFeatures) {
  CpuBackend backend(1);
  for (const char* layer : {"type: 'Convolution' convolution_param { num_output: 2 kernel_size: 1 }",
                            "type: 'Deconvolution' convolution_param { num_output: 2 kernel_size: 1 }",
                            "type: 'InnerProduct' inner_product_param { num_output: 2 }"}) {
    proto::LayerParameter lp;
    parse_prototxt_string(layer, "test", lp);
    Node node = caffe_layer_node(lp, "test");
    const KernelRegistry::Entry* ref = nullptr;
    for (const KernelRegistry::Entry* e : KernelRegistry::get().entries(node.type))
      if (e->name == "reference") ref = e;
    ASSERT_NE(ref, nullptr) << node.type;
    auto supports = [&](const Node& n) {
      OpInit init{n, "test", proto::TEST, kHarnessSeed, backend};
      return ref->computes(init.precision()) && (!ref->supports || ref->supports(init));
    };
    EXPECT_TRUE(supports(node)) << node.type;
    Node bf16 = node;
    bf16.deploy.precision = Precision::bf16;
    EXPECT_FALSE(supports(bf16)) << node.type << " in bf16";
    Node fused = node;
    fused.deploy.fusion.relu = true;
    EXPECT_FALSE(supports(fused)) << node.type << " with a fused ReLU";
    Node int8 = node;
    int8.deploy.int8_input_threshold = 1.f;
    int8.deploy.precision = Precision::int8;
    EXPECT_FALSE(supports(int8)) << node.type << " in int8";
  }
}

// Kernels are chosen for the node's precision: a node asking for one no kernel of its type
// computes is a clear error, not a silent fp32 run.
TEST(OpSweep, KernelsAreChosenForTheNodesPrecision) {
  CpuBackend backend(1);
  proto::LayerParameter lp;
  parse_prototxt_string("name: 'r' type: 'ReLU'", "test", lp);
  Node relu = caffe_layer_node(lp, "test");
  relu.deploy.precision = Precision::bf16;
  try {
    KernelRegistry::get().create(OpInit{relu, "test", proto::TEST, kHarnessSeed, backend});
    ADD_FAILURE() << "a bf16 ReLU was built";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("computes in bf16"), std::string::npos) << e.what();
  }
  for (const KernelRegistry::Entry* e : KernelRegistry::get().entries("Convolution")) {
    if (e->name == "oneDNN") {
      EXPECT_TRUE(e->computes(Precision::fp32) && e->computes(Precision::bf16) && e->computes(Precision::int8));
    }
  }
}

// ---- Per case ----

class OpSweepCase : public ::testing::TestWithParam<SweepCase> {};

TEST_P(OpSweepCase, ReferenceForwardMatchesOracle) {
  const SweepCase& c = GetParam();
  if (!c.oracle) GTEST_SKIP() << "exempt from the forward oracle: " << c.no_oracle;
  std::string ref = reference_kernel(type_of(c));
  ASSERT_NE(ref, "") << type_of(c) << " has no reference kernel";
  auto h = harness(c, ref);
  std::vector<Tensor> want = c.oracle(*h);  // before forward: nothing may have touched the inputs
  h->forward();
  ASSERT_EQ(want.size(), h->out.size());
  for (size_t j = 0; j < want.size(); ++j) expect_close(h->out[j], want[j], c.fwd_tol, "output " + std::to_string(j));
}

TEST_P(OpSweepCase, ReferenceGradientsMatchFiniteDifferences) {
  const SweepCase& c = GetParam();
  if (!c.no_gradient.empty()) GTEST_SKIP() << "exempt from the gradient check: " << c.no_gradient;
  std::string ref = reference_kernel(type_of(c));
  ASSERT_NE(ref, "") << type_of(c) << " has no reference kernel";
  auto h = harness(c, ref);
  h->check_gradients(c.step, c.grad_tol, c.grad_inputs);
}

// The case's layer, read by the Caffe front end, keeps its typed attributes through the
// Caffe writer and through the bundle's JSON: both forms say the same thing.
TEST_P(OpSweepCase, AttributesRoundTripThroughCaffeAndJson) {
  const SweepCase& c = GetParam();
  proto::LayerParameter lp;
  parse_prototxt_string(c.layer, c.name, lp);
  // As in a net, every output has a top (HDF5Data reads the datasets its tops name).
  for (int j = lp.top_size(); j < c.outputs; ++j) lp.add_top("out" + std::to_string(j));
  Graph g;
  g.name = c.name;
  Node n = caffe_layer_node(lp, c.name);
  if (n.name.empty()) n.name = "op";
  for (size_t i = 0; i < c.in.size(); ++i) {
    Node in;
    in.name = "in" + std::to_string(i);
    make_external_input(in, {c.in[i]});
    in.outputs = {g.add_value(in.name)};
    n.inputs.push_back(in.outputs[0]);
    g.nodes.push_back(std::move(in));
  }
  for (int j = 0; j < c.outputs; ++j) n.outputs.push_back(g.add_value(lp.top(j)));
  g.nodes.push_back(std::move(n));
  relink(g);
  const std::string json = graph_to_json(g);
  EXPECT_EQ(graph_to_json(graph_from_json(json, "round trip")), json);
  // Caffe: write the node back as a layer and read it again.
  Graph again = g;
  int last = static_cast<int>(g.nodes.size()) - 1;
  again.nodes[last] = caffe_layer_node(caffe_layer(g, last), "again");
  again.nodes[last].inputs = g.nodes[last].inputs;
  again.nodes[last].outputs = g.nodes[last].outputs;
  EXPECT_EQ(graph_to_json(again), json) << caffe_layer(g, last).DebugString();
}

// Same parameters, inputs and output gradients for every kernel: copied from the
// reference's harness (both are built from the same seeds anyway).
TEST_P(OpSweepCase, OtherKernelsMatchTheReference) {
  const SweepCase& c = GetParam();
  if (!c.oracle) GTEST_SKIP() << "exempt: " << c.no_oracle;
  if (!c.no_other_kernels.empty()) GTEST_SKIP() << "exempt: " << c.no_other_kernels;
  std::string type = type_of(c), ref_name = reference_kernel(type);
  ASSERT_NE(ref_name, "") << type << " has no reference kernel";
  auto ref = harness(c, ref_name);
  bool grads = c.no_gradient.empty();
  ref->forward();
  if (grads) ref->backward();
  CpuBackend backend(1);
  const OpInit init{ref->node(), "test", c.phase, kHarnessSeed, backend};
  for (const KernelRegistry::Entry* e : KernelRegistry::get().entries(type)) {
    if (e->device != DeviceKind::cpu || e->name == ref_name) continue;
    if (e->supports && !e->supports(init)) continue;  // e.g. oneDNN's LSTM without a static input
    SCOPED_TRACE("kernel " + e->name);
    auto other = harness(c, e->name);
    for (size_t i = 0; i < ref->in.size(); ++i) other->in[i].copy_from(ref->in[i]);
    for (size_t p = 0; p < ref->params.size(); ++p) other->params[p].copy_from(ref->params[p]);
    for (size_t j = 0; j < ref->out_grad.size(); ++j) other->out_grad[j].copy_from(ref->out_grad[j]);
    other->forward();
    for (size_t j = 0; j < ref->out.size(); ++j)
      expect_close(other->out[j], ref->out[j], c.kernel_tol, e->name + " output " + std::to_string(j));
    if (!grads) continue;
    other->backward();
    for (size_t i = 0; i < ref->in.size(); ++i) {
      bool checked = c.grad_inputs.empty()
                         ? ref->can_propagate_to(static_cast<int>(i))
                         : std::count(c.grad_inputs.begin(), c.grad_inputs.end(), static_cast<int>(i)) > 0;
      if (checked)
        expect_close(other->in_grad[i], ref->in_grad[i], c.kernel_tol,
                     e->name + " input gradient " + std::to_string(i));
    }
    for (size_t p = 0; p < ref->param_grad.size(); ++p)
      if (ref->param_grad[p].defined())
        expect_close(other->param_grad[p], ref->param_grad[p], c.kernel_tol,
                     e->name + " parameter gradient " + std::to_string(p));
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpSweepCase, ::testing::ValuesIn(sweep_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace bks::test
