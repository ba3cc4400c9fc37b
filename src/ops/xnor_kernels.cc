#include "ops/xnor_kernels.h"

#include <algorithm>
#include <atomic>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bks {
namespace {

void gemm_scalar(const uint64_t* a, int64_t m, int64_t words, const uint64_t* bt, int64_t n_pad, int32_t* counts) {
  for (int64_t i = 0; i < m; ++i) {
    int32_t* c = counts + i * n_pad;
    std::fill(c, c + n_pad, 0);
    for (int64_t w = 0; w < words; ++w) {
      const uint64_t x = a[i * words + w];
      const uint64_t* b = bt + w * n_pad;
      for (int64_t j = 0; j < n_pad; ++j) c[j] += __builtin_popcountll(x ^ b[j]);
    }
  }
}

#if defined(__x86_64__)
// One row against V groups of 8 filters: the row's word, broadcast, meets 8 filters' words
// an instruction; V accumulators stay in registers across the words.
template <int V>
__attribute__((target("avx512f,avx512vpopcntdq"))) void row_avx512(const uint64_t* a, int64_t words, const uint64_t* bt,
                                                                   int64_t n_pad, int32_t* c) {
  __m512i acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_si512();
  for (int64_t w = 0; w < words; ++w) {
    const __m512i x = _mm512_set1_epi64(static_cast<long long>(a[w]));
    const uint64_t* b = bt + w * n_pad;
    for (int v = 0; v < V; ++v)
      acc[v] = _mm512_add_epi64(acc[v], _mm512_popcnt_epi64(_mm512_xor_si512(x, _mm512_loadu_si512(b + 8 * v))));
  }
  for (int v = 0; v < V; ++v)
    // (maskz: GCC 12 warns of an undefined register inside the unmasked form.)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * v), _mm512_maskz_cvtepi64_epi32(0xff, acc[v]));
}

__attribute__((target("avx512f,avx512vpopcntdq"))) void gemm_avx512(const uint64_t* a, int64_t m, int64_t words,
                                                                    const uint64_t* bt, int64_t n_pad,
                                                                    int32_t* counts) {
  using Row = void (*)(const uint64_t*, int64_t, const uint64_t*, int64_t, int32_t*);
  static constexpr Row rows[] = {row_avx512<1>, row_avx512<2>, row_avx512<3>, row_avx512<4>,
                                 row_avx512<5>, row_avx512<6>, row_avx512<7>, row_avx512<8>};
  // Up to 64 filters at a time (8 accumulators); each block sweeps every row.
  for (int64_t j0 = 0; j0 < n_pad; j0 += 64) {
    const Row row = rows[std::min<int64_t>(8, (n_pad - j0) / 8) - 1];
    for (int64_t i = 0; i < m; ++i) row(a + i * words, words, bt + j0, n_pad, counts + i * n_pad + j0);
  }
}

bool cpu_has_vpopcntdq() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
  return has;
}
#else
bool cpu_has_vpopcntdq() { return false; }
#endif

std::atomic<bool> g_force_scalar{false};

bool use_vector() { return cpu_has_vpopcntdq() && !g_force_scalar.load(std::memory_order_relaxed); }

}  // namespace

void pack_signs(const float* x, int64_t n, int64_t stride, uint64_t* out) {
  for (int64_t w = 0; w < sign_words(n); ++w) {
    const int64_t begin = 64 * w, end = std::min(n, begin + 64);
    uint64_t bits = 0;
    for (int64_t i = begin; i < end; ++i) bits |= static_cast<uint64_t>(x[i * stride] >= 0.f) << (i - begin);
    out[w] = bits;
  }
}

void xor_popcount_gemm(const uint64_t* a, int64_t m, int64_t words, const uint64_t* bt, int64_t n_pad,
                       int32_t* counts) {
#if defined(__x86_64__)
  if (use_vector()) return gemm_avx512(a, m, words, bt, n_pad, counts);
#endif
  gemm_scalar(a, m, words, bt, n_pad, counts);
}

const char* popcount_path() { return use_vector() ? "AVX-512 VPOPCNTDQ" : "scalar popcount"; }

void force_scalar_popcount(bool scalar) { g_force_scalar = scalar; }

}  // namespace bks
