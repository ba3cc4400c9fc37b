#include "ops/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace bks {
namespace {

using dnnl::memory;

// Eight channels: one AVX2 register (GCC/Clang vector extension; narrower ISAs split it).
typedef float v8 __attribute__((vector_size(32)));

inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }
inline v8 splat(float f) { return v8{f, f, f, f, f, f, f, f}; }

constexpr int kTile = 4;     // outputs per tile side
constexpr int kIn = 6;       // inputs per tile side: kTile + 3 - 1
constexpr int kPoints = 36;  // kIn * kIn: the products per tile

// Bytes of transformed inputs and products kept per chunk of tiles: enough rows for sgemm
// to run near its peak, few enough to stay in the last-level cache between the phases.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

// B^T d for one column of six input values (Lavin and Gray's F(4x4, 3x3) matrices).
inline void input_column(const v8* d, v8* t) {
  const v8 four = splat(4.f), five = splat(5.f), two = splat(2.f);
  t[0] = four * d[0] - five * d[2] + d[4];
  t[1] = d[3] + d[4] - four * (d[1] + d[2]);
  t[2] = four * (d[1] - d[2]) + d[4] - d[3];
  t[3] = two * (d[3] - d[1]) + d[4] - d[2];
  t[4] = two * (d[1] - d[3]) + d[4] - d[2];
  t[5] = four * d[1] - five * d[3] + d[5];
}

// A^T m for one column of six products.
inline void output_column(const v8* m, v8* y) {
  const v8 two = splat(2.f), four = splat(4.f), eight = splat(8.f);
  const v8 a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
  y[0] = m[0] + a + c;
  y[1] = b + two * d;
  y[2] = a + four * c;
  y[3] = b + eight * d + m[5];
}

// Up to this many tiles, the products run in small_gemm: at batch 1 on small planes (8x8:
// four tiles) the 36 sgemm calls cost more in their set-up than in arithmetic.
constexpr int64_t kSmallGemmRows = 16;

// c[m][n] = a[m][k] b[k][n] (row-major, n a multiple of 8) for a few rows: four rows at a
// time against 16 columns, b streamed from cache once per four rows.
void small_gemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    const float* a0 = a + r * k;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      v8 acc[4][2] = {};
      for (int64_t q = 0; q < k; ++q) {
        const v8 b0 = load8(b + q * n + j), b1 = load8(b + q * n + j + 8);
        for (int i = 0; i < 4; ++i) {
          const v8 x = splat(a0[i * k + q]);
          acc[i][0] += x * b0;
          acc[i][1] += x * b1;
        }
      }
      for (int i = 0; i < 4; ++i) {
        store8(c + (r + i) * n + j, acc[i][0]);
        store8(c + (r + i) * n + j + 8, acc[i][1]);
      }
    }
    for (; j < n; j += 8) {
      v8 acc[4] = {};
      for (int64_t q = 0; q < k; ++q) {
        const v8 b0 = load8(b + q * n + j);
        for (int i = 0; i < 4; ++i) acc[i] += splat(a0[i * k + q]) * b0;
      }
      for (int i = 0; i < 4; ++i) store8(c + (r + i) * n + j, acc[i]);
    }
  }
  for (; r < m; ++r)
    for (int64_t j = 0; j < n; j += 8) {
      v8 acc = {};
      for (int64_t q = 0; q < k; ++q) acc += splat(a[r * k + q]) * load8(b + q * n + j);
      store8(c + r * n + j, acc);
    }
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  if (m <= kSmallGemmRows) return small_gemm(m, n, k, a, b, c);
  dnnl::status s = dnnl::sgemm('N', 'N', m, n, k, 1.f, a, k, b, n, 0.f, c, n);
  BKS_CHECK(s == dnnl::status::success, "dnnl_sgemm {}x{}x{} failed ({})", m, n, k, static_cast<int>(s));
}

}  // namespace

bool WinogradConv::applies(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t group,
                           const WinogradShape& s, const memory::desc& src, const memory::desc& dst) {
  if (kh != 3 || kw != 3 || sh != 1 || sw != 1 || dh != 1 || dw != 1 || group != 1) return false;
  if (s.c % 8 || s.oc % 8 || s.ph < 0 || s.ph > 2 || s.pw < 0 || s.pw > 2) return false;
  const auto f32 = memory::data_type::f32;
  return src == memory::desc({s.n, s.c, s.h, s.w}, f32, memory::format_tag::nChw8c) &&
         dst == memory::desc({s.n, s.oc, s.oh, s.ow}, f32, memory::format_tag::nChw8c);
}

WinogradConv::WinogradConv(const WinogradShape& s, const FusedPostOps& post) : s_(s), post_(post) {
  tiles_h_ = (s.oh + kTile - 1) / kTile;
  tiles_w_ = (s.ow + kTile - 1) / kTile;
  const int64_t tiles = s.n * tiles_h_ * tiles_w_;
  chunk_ = std::clamp<int64_t>(kChunkBytes / (kPoints * 4 * (s.c + s.oc)), 16, tiles);
  chunk_ = std::min(chunk_, tiles);
}

void WinogradConv::set_weights(const float* w, const float* bias) {
  const int64_t c = s_.c, oc = s_.oc;
  u_.assign(static_cast<size_t>(kPoints * c * oc), 0.f);
  // u = G g G^T per (output, input) channel pair, in double: the weights are transformed once.
  static const double G[kIn][3] = {{1. / 4, 0, 0},           {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
                                   {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < c; ++i) {
      const float* g = w + (o * c + i) * 9;
      double gg[kIn][3];  // G g
      for (int a = 0; a < kIn; ++a)
        for (int k = 0; k < 3; ++k) gg[a][k] = G[a][0] * g[k] + G[a][1] * g[3 + k] + G[a][2] * g[6 + k];
      for (int a = 0; a < kIn; ++a)
        for (int b = 0; b < kIn; ++b) {
          const double u = gg[a][0] * G[b][0] + gg[a][1] * G[b][1] + gg[a][2] * G[b][2];
          u_[static_cast<size_t>(((a * kIn + b) * c + i) * oc + o)] = static_cast<float>(u);
        }
    }
  bias_.assign(static_cast<size_t>(oc), 0.f);
  if (bias) std::copy(bias, bias + oc, bias_.begin());
}

void WinogradConv::input_transform(const float* src, float* v, int64_t t0, int64_t tiles) const {
  const int64_t cb_n = s_.c / 8, per_img = tiles_h_ * tiles_w_, H = s_.h, W = s_.w;
  const int64_t items = tiles * cb_n;
#pragma omp parallel for schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t lt = it / cb_n, cb = it % cb_n, t = t0 + lt;
    const int64_t n = t / per_img, r = t % per_img;
    const int64_t ih0 = (r / tiles_w_) * kTile - s_.ph, iw0 = (r % tiles_w_) * kTile - s_.pw;
    const float* img = src + (n * cb_n + cb) * H * W * 8;
    v8 d[kIn][kIn];
    for (int i = 0; i < kIn; ++i) {
      const int64_t ih = ih0 + i;
      for (int j = 0; j < kIn; ++j) {
        const int64_t iw = iw0 + j;
        d[i][j] = ih >= 0 && ih < H && iw >= 0 && iw < W ? load8(img + (ih * W + iw) * 8) : splat(0.f);
      }
    }
    v8 t_[kIn][kIn];  // B^T d, column by column
    for (int j = 0; j < kIn; ++j) {
      v8 col[kIn], out[kIn];
      for (int i = 0; i < kIn; ++i) col[i] = d[i][j];
      input_column(col, out);
      for (int i = 0; i < kIn; ++i) t_[i][j] = out[i];
    }
    for (int a = 0; a < kIn; ++a) {  // (B^T d) B, row by row
      v8 out[kIn];
      input_column(t_[a], out);
      for (int b = 0; b < kIn; ++b) store8(v + ((a * kIn + b) * chunk_ + lt) * s_.c + cb * 8, out[b]);
    }
  }
}

void WinogradConv::output_transform(const float* m, float* dst, const float* residual, int64_t t0,
                                    int64_t tiles) const {
  const int64_t ob_n = s_.oc / 8, per_img = tiles_h_ * tiles_w_, OH = s_.oh, OW = s_.ow;
  const int64_t items = tiles * ob_n;
  const bool relu = post_.relu;
  const bool bounded = post_.bounded();
  const v8 slope = splat(post_.relu_slope), zero = splat(0.f), top = splat(post_.relu_max);
#pragma omp parallel for schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t lt = it / ob_n, ob = it % ob_n, t = t0 + lt;
    const int64_t n = t / per_img, r = t % per_img;
    const int64_t oh0 = (r / tiles_w_) * kTile, ow0 = (r % tiles_w_) * kTile;
    v8 s[kTile][kIn];  // A^T m, column by column
    for (int j = 0; j < kIn; ++j) {
      v8 col[kIn], out[kTile];
      for (int i = 0; i < kIn; ++i) col[i] = load8(m + ((i * kIn + j) * chunk_ + lt) * s_.oc + ob * 8);
      output_column(col, out);
      for (int a = 0; a < kTile; ++a) s[a][j] = out[a];
    }
    const v8 bias = load8(bias_.data() + ob * 8);
    const int64_t img = (n * ob_n + ob) * OH * OW * 8;
    for (int a = 0; a < kTile && oh0 + a < OH; ++a) {
      v8 y[kTile];
      output_column(s[a], y);  // (A^T m) A
      for (int b = 0; b < kTile && ow0 + b < OW; ++b) {
        const int64_t at = img + ((oh0 + a) * OW + ow0 + b) * 8;
        v8 out = y[b] + bias;
        if (residual) out += load8(residual + at);
        if (relu) out = out > zero ? out : out * slope;
        if (bounded) out = out < top ? out : top;
        store8(dst + at, out);
      }
    }
  }
}

void WinogradConv::forward(const float* src, float* dst, const float* residual) {
  BKS_CHECK(has_weights(), "Winograd convolution run before its weights were set");
  BKS_CHECK(!post_.residual_sum || residual, "Winograd convolution: the fused residual is missing");
  const int64_t tiles = s_.n * tiles_h_ * tiles_w_;
  // One scratch buffer per calling thread, shared by every Winograd layer it runs: it stays
  // in cache from layer to layer, where a buffer per layer would come from memory each time.
  thread_local std::vector<float> scratch;
  const size_t need = static_cast<size_t>(kPoints * chunk_ * (s_.c + s_.oc));
  if (scratch.size() < need) scratch.resize(need);
  float* v = scratch.data();
  float* m = v + kPoints * chunk_ * s_.c;
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk_) {
    const int64_t nt = std::min(chunk_, tiles - t0);
    input_transform(src, v, t0, nt);
    // The 36 products, split across the threads (each sgemm runs on the thread that calls it).
#pragma omp parallel for schedule(static)
    for (int p = 0; p < kPoints; ++p)
      sgemm(nt, s_.oc, s_.c, v + p * chunk_ * s_.c, u_.data() + p * s_.c * s_.oc, m + p * chunk_ * s_.oc);
    output_transform(m, dst, post_.residual_sum ? residual : nullptr, t0, nt);
  }
}

}  // namespace bks
