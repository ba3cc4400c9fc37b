#include "ops/dw_conv_int8.h"

#include <omp.h>

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bks {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

constexpr int kLanes = 16;  // channels of one block: one zmm of s32 accumulators
constexpr int kRun = 8;     // outputs of a row kept in registers together

bool cpu_has_avx512_vnni_vbmi() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx512vbmi");
  return has;
#else
  return false;
#endif
}

#if defined(__x86_64__)
struct RowArgs {
  const uint8_t* src;  // the image
  uint8_t* dst;        // its destination row (oh), element bytes given by the type
  const int32_t* w;    // the block's [kw][16] weights
  const float* bias;   // the block's 16
  const float* scale;
  int64_t c, h, w_in, ow, ph, pw, oh, block;
  __mmask16 mask;  // the block's channels that exist
  bool relu, bounded;
  float slope, top;
};

// Byte 4c + r of a gathered column is byte c of row r (128-bit lane r); byte 4c + 3 is zeroed.
struct alignas(64) GatherIndex {
  uint8_t bytes[64];
};
constexpr GatherIndex make_gather_index() {
  GatherIndex g{};
  for (int ch = 0; ch < kLanes; ++ch)
    for (int r = 0; r < 4; ++r) g.bytes[4 * ch + r] = static_cast<uint8_t>(16 * r + ch);
  return g;
}
constexpr GatherIndex kGather = make_gather_index();

#define BKS_DW_ISA "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"
#define BKS_DW_INLINE __attribute__((target(BKS_DW_ISA), always_inline)) inline

// The kRun accumulators are separate locals (GCC keeps an array of them on the stack),
// picked by a compile-time index.
template <int O>
BKS_DW_INLINE __m512i& slot(__m512i& a0, __m512i& a1, __m512i& a2, __m512i& a3, __m512i& a4, __m512i& a5, __m512i& a6,
                            __m512i& a7) {
  static_assert(O >= 0 && O < kRun);
  return std::get<O>(std::tie(a0, a1, a2, a3, a4, a5, a6, a7));
}

// Tap column KW of output o reads source column o * S + KW: column J adds into that output.
template <int S, int J, int KW>
BKS_DW_INLINE void tap(__m512i x, __m512i w, __m512i& a0, __m512i& a1, __m512i& a2, __m512i& a3, __m512i& a4,
                       __m512i& a5, __m512i& a6, __m512i& a7) {
  constexpr int d = J - KW;
  if constexpr (d >= 0 && d % S == 0 && d / S < kRun) {
    __m512i& acc = slot<d / S>(a0, a1, a2, a3, a4, a5, a6, a7);
    acc = _mm512_dpbusd_epi32(acc, x, w);
  }
}

// The three rows of source column J: 16 channels of each, gathered so that channel c's
// dword holds its bytes from rows 0, 1 and 2 and a zero, against weights laid out alike:
// one VNNI instruction then adds a whole window column. Outside the image (Edge) the column
// adds nothing.
template <int S, bool Edge, int J>
BKS_DW_INLINE void column(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, __mmask16 m0, __mmask16 m1,
                          __mmask16 m2, int64_t iw0, int64_t width, int64_t c, __m512i gather, const __m512i* wv,
                          __m512i& a0, __m512i& a1, __m512i& a2, __m512i& a3, __m512i& a4, __m512i& a5, __m512i& a6,
                          __m512i& a7) {
  const int64_t iw = iw0 + J;
  if (Edge && (iw < 0 || iw >= width)) return;
  const int64_t off = iw * c;
  __m512i z = _mm512_zextsi128_si512(_mm_maskz_loadu_epi8(m0, r0 + off));
  z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(m1, r1 + off), 1);
  z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(m2, r2 + off), 2);
  const __m512i x = _mm512_maskz_permutexvar_epi8(0x7777777777777777ull, gather, z);
  tap<S, J, 0>(x, wv[0], a0, a1, a2, a3, a4, a5, a6, a7);
  tap<S, J, 1>(x, wv[1], a0, a1, a2, a3, a4, a5, a6, a7);
  tap<S, J, 2>(x, wv[2], a0, a1, a2, a3, a4, a5, a6, a7);
}

template <int S, bool Edge, int... J>
BKS_DW_INLINE void add_columns(std::integer_sequence<int, J...>, const uint8_t* r0, const uint8_t* r1,
                               const uint8_t* r2, __mmask16 m0, __mmask16 m1, __mmask16 m2, int64_t iw0, int64_t width,
                               int64_t c, __m512i gather, const __m512i* wv, __m512i& a0, __m512i& a1, __m512i& a2,
                               __m512i& a3, __m512i& a4, __m512i& a5, __m512i& a6, __m512i& a7) {
  (column<S, Edge, J>(r0, r1, r2, m0, m1, m2, iw0, width, c, gather, wv, a0, a1, a2, a3, a4, a5, a6, a7), ...);
}

// What a destination element is: u8, s8 or f32.
enum class Out { u8, s8, f32 };
template <Out O>
using OutT = std::conditional_t<O == Out::f32, float, uint8_t>;

struct Epilogue {
  __m512 bias, scale, slope, top;
  __mmask16 mask;
  bool relu, bounded;  // a (leaky) ReLU; a clip to [0, top] instead
};

// 16 accumulators to the destination: y = post(scale * (acc + bias)), rounded to nearest
// (ties to even, MXCSR's default) and saturated for int8.
// (The maskz forms: GCC 12 warns of an undefined register inside the unmasked ones.)
template <Out O>
BKS_DW_INLINE void finish(__m512i acc, uint8_t* out, const Epilogue& e) {
  constexpr __mmask16 all = 0xffff;
  __m512 y = _mm512_mul_ps(_mm512_add_ps(_mm512_maskz_cvtepi32_ps(all, acc), e.bias), e.scale);
  if (e.bounded) y = _mm512_maskz_min_ps(all, _mm512_maskz_max_ps(all, y, _mm512_setzero_ps()), e.top);
  if constexpr (O == Out::u8) {
    // Saturating at 0 is the ReLU without a slope; a leaky one's negatives round to 0 too.
    const __m512i q = _mm512_maskz_max_epi32(all, _mm512_maskz_cvtps_epi32(all, y), _mm512_setzero_si512());
    _mm512_mask_cvtusepi32_storeu_epi8(out, e.mask, q);
  } else {
    if (e.relu && !e.bounded)
      y = _mm512_mask_mul_ps(y, _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_LT_OQ), y, e.slope);
    if constexpr (O == Out::f32)
      _mm512_mask_storeu_ps(out, e.mask, y);
    else
      _mm512_mask_cvtsepi32_storeu_epi8(out, e.mask, _mm512_maskz_cvtps_epi32(all, y));
  }
}

// One block of 16 channels across a destination row, kRun outputs at a time.
template <int S, Out Out>
__attribute__((target(BKS_DW_ISA))) void dw_row(const RowArgs& a) {
  constexpr int kCols = (kRun - 1) * S + 3;  // source columns under kRun outputs
  const auto columns = std::make_integer_sequence<int, kCols>{};
  const __m512i gather = _mm512_load_si512(kGather.bytes);
  __m512i wv[3];
  for (int t = 0; t < 3; ++t) wv[t] = _mm512_loadu_si512(a.w + t * kLanes);
  const __m512 bias = _mm512_loadu_ps(a.bias), scale = _mm512_loadu_ps(a.scale);
  const __m512 slope = _mm512_set1_ps(a.slope), top = _mm512_set1_ps(a.top);
  const int64_t block_offset = a.block * kLanes;
  // Rows above or below the image load nothing (their mask is empty; the pointer stays inside).
  auto row = [&](int kh, __mmask16& mask) {
    const int64_t ih = a.oh * S - a.ph + kh;
    const bool inside = ih >= 0 && ih < a.h;
    mask = inside ? a.mask : static_cast<__mmask16>(0);
    return a.src + (inside ? ih : 0) * a.w_in * a.c + block_offset;
  };
  __mmask16 m0, m1, m2;
  const uint8_t *r0 = row(0, m0), *r1 = row(1, m1), *r2 = row(2, m2);
  for (int64_t ow0 = 0; ow0 < a.ow; ow0 += kRun) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const int64_t iw0 = ow0 * S - a.pw;
    if (iw0 < 0 || iw0 + kCols > a.w_in)
      add_columns<S, true>(columns, r0, r1, r2, m0, m1, m2, iw0, a.w_in, a.c, gather, wv, a0, a1, a2, a3, a4, a5, a6,
                           a7);
    else
      add_columns<S, false>(columns, r0, r1, r2, m0, m1, m2, iw0, a.w_in, a.c, gather, wv, a0, a1, a2, a3, a4, a5, a6,
                            a7);
    const int n = static_cast<int>(std::min<int64_t>(kRun, a.ow - ow0));
    uint8_t* out = a.dst + (ow0 * a.c + block_offset) * static_cast<int64_t>(sizeof(OutT<Out>));
    const int64_t step = a.c * static_cast<int64_t>(sizeof(OutT<Out>));
    const Epilogue e{bias, scale, slope, top, a.mask, a.relu, a.bounded};
    finish<Out>(a0, out, e);
    if (n > 1) finish<Out>(a1, out + step, e);
    if (n > 2) finish<Out>(a2, out + 2 * step, e);
    if (n > 3) finish<Out>(a3, out + 3 * step, e);
    if (n > 4) finish<Out>(a4, out + 4 * step, e);
    if (n > 5) finish<Out>(a5, out + 5 * step, e);
    if (n > 6) finish<Out>(a6, out + 6 * step, e);
    if (n > 7) finish<Out>(a7, out + 7 * step, e);
  }
}
#endif

}  // namespace

bool DwInt8Conv::cpu_supported() { return cpu_has_avx512_vnni_vbmi(); }

bool DwInt8Conv::applies(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t group,
                         const DwInt8Shape& s, const dnnl::memory::desc& src, const dnnl::memory::desc& dst,
                         const FusedPostOps& post) {
  if (!cpu_has_avx512_vnni_vbmi() || kh != 3 || kw != 3 || sh != sw || (sh != 1 && sh != 2) || dh != 1 || dw != 1 ||
      group != s.c || s.ph > 2 || s.pw > 2 || post.residual_sum)
    return false;
  const dt st = src.data_type(), dtp = dst.data_type();
  if (st != dt::u8 || (dtp != dt::u8 && dtp != dt::s8 && dtp != dt::f32)) return false;
  return src == dnnl::memory::desc({s.n, s.c, s.h, s.w}, st, tag::nhwc) &&
         dst == dnnl::memory::desc({s.n, s.c, s.oh, s.ow}, dtp, tag::nhwc);
}

DwInt8Conv::DwInt8Conv(const DwInt8Shape& s, dt dst_type, const FusedPostOps& post)
    : s_(s), dst_type_(dst_type), post_(post) {
  blocks_ = (s.c + kLanes - 1) / kLanes;
}

void DwInt8Conv::set_weights(const int8_t* weights, const float* bias, const float* scale) {
  const size_t padded = static_cast<size_t>(blocks_ * kLanes);
  w_.assign(padded * 3, 0);
  bias_.assign(padded, 0.f);
  scale_.assign(padded, 0.f);
  for (int64_t ch = 0; ch < s_.c; ++ch) {
    const int64_t b = ch / kLanes, lane = ch % kLanes;
    for (int kw = 0; kw < 3; ++kw) {
      // Bytes 0, 1, 2: the window's rows 0, 1, 2 at this column; byte 3 stays 0.
      uint32_t word = 0;
      for (int kh = 0; kh < 3; ++kh)
        word |= static_cast<uint32_t>(static_cast<uint8_t>(weights[ch * 9 + kh * 3 + kw])) << (8 * kh);
      w_[static_cast<size_t>((b * 3 + kw) * kLanes + lane)] = static_cast<int32_t>(word);
    }
    bias_[static_cast<size_t>(ch)] = bias ? bias[ch] : 0.f;
    scale_[static_cast<size_t>(ch)] = scale[ch];
  }
}

void DwInt8Conv::forward(const void* src, void* dst) const {
#if defined(__x86_64__)
  const int dst_bytes = dst_type_ == dt::f32 ? 4 : 1;
  const bool relu = post_.relu;
  const int64_t rows = s_.n * s_.oh, items = rows * blocks_;
  using Row = void (*)(const RowArgs&);
  static constexpr Row kRows[2][3] = {{dw_row<1, Out::u8>, dw_row<1, Out::s8>, dw_row<1, Out::f32>},
                                      {dw_row<2, Out::u8>, dw_row<2, Out::s8>, dw_row<2, Out::f32>}};
  const Row run = kRows[s_.stride == 1 ? 0 : 1][dst_type_ == dt::u8 ? 0 : dst_type_ == dt::s8 ? 1 : 2];
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  // Rows times channel blocks, the blocks of a row next to each other: a thread's
  // consecutive items read the same source lines.
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t r = item / blocks_, b = item % blocks_;
    const int64_t n = r / s_.oh, oh = r % s_.oh;
    const int64_t left = s_.c - b * kLanes;
    RowArgs a{in + n * s_.h * s_.w * s_.c,
              out + (r * s_.ow * s_.c) * dst_bytes,
              w_.data() + b * 3 * kLanes,
              bias_.data() + b * kLanes,
              scale_.data() + b * kLanes,
              s_.c,
              s_.h,
              s_.w,
              s_.ow,
              s_.ph,
              s_.pw,
              oh,
              b,
              static_cast<__mmask16>(left >= kLanes ? 0xffff : (1u << left) - 1u),
              relu,
              post_.bounded(),
              post_.relu_slope,
              post_.relu_max};
    run(a);
  }
#else
  (void)src;
  (void)dst;
#endif
}

}  // namespace bks
