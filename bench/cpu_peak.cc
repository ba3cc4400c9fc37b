// The arithmetic ceiling of this CPU for the two instructions inference spends its time in:
// AVX-512 FMA (fp32) and VNNI vpdpbusd (u8 x s8 into s32), each thread keeping 12
// independent accumulators busy so that only throughput limits it. A convolution at a
// layer's compute-bound limit runs near these figures; a ratio against a peer that would
// need more than them is out of reach on this machine (docs/benchmarks.md).
//   cpu_peak_bench [THREADS] [ROUNDS]   (default: 2 threads, best of 5 rounds)
// Prints the best round of each as GFLOP/s or GOP/s (a multiply-add counts as 2).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

constexpr long kSteps = 50'000'000;  // per thread and round

// Twelve accumulators as named locals: GCC keeps an array of vectors on the stack.
#define BKS_TWELVE(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

__attribute__((target("avx512f"), noinline)) float fma_steps(long steps) {
#define BKS_INIT(k) __m512 a##k = _mm512_set1_ps(k);
  BKS_TWELVE(BKS_INIT)
  const __m512 m = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-9f);
  for (long i = 0; i < steps; ++i) {
#define BKS_STEP(k) a##k = _mm512_fmadd_ps(a##k, m, c);
    BKS_TWELVE(BKS_STEP)
  }
  // One lane of each keeps the loop (GCC 12 warns inside _mm512_reduce_add_* and the casts).
  alignas(64) float lanes[16];
  float s = 0;
#define BKS_SUM(k) _mm512_store_ps(lanes, a##k), s += lanes[0];
  BKS_TWELVE(BKS_SUM)
  return s;
}

__attribute__((target("avx512f,avx512vnni"), noinline)) long vnni_steps(long steps) {
#define BKS_INIT_I(k) __m512i a##k = _mm512_set1_epi32(k);
  BKS_TWELVE(BKS_INIT_I)
  const __m512i u = _mm512_set1_epi8(1), w = _mm512_set1_epi8(2);
  for (long i = 0; i < steps; ++i) {
#define BKS_STEP_I(k) a##k = _mm512_dpbusd_epi32(a##k, u, w);
    BKS_TWELVE(BKS_STEP_I)
  }
  alignas(64) int lanes[16];
  long s = 0;
#define BKS_SUM_I(k) _mm512_store_si512(lanes, a##k), s += lanes[0];
  BKS_TWELVE(BKS_SUM_I)
  return s;
}

// The best of `rounds` rounds of `threads` threads each running `body`, in G operations/s,
// `ops` operations per step.
template <class F>
double best_rate(int threads, int rounds, double ops, F&& body) {
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    double sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += static_cast<double>(body(kSteps));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, threads * kSteps * 12 * ops / s / 1e9 + 0 * sink);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2, rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (threads < 1 || rounds < 1) {
    fmt::print(stderr, "usage: cpu_peak_bench [THREADS >= 1] [ROUNDS >= 1]\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx512f")) {
    fmt::print("cpu_peak_bench: this CPU has no AVX-512\n");
    return 0;
  }
  // A zmm FMA is 16 multiply-adds; a zmm vpdpbusd 64.
  fmt::print("fp32 AVX-512 FMA, {} threads: {:.0f} GFLOP/s\n", threads,
             best_rate(threads, rounds, 32, [](long n) { return fma_steps(n); }));
  if (__builtin_cpu_supports("avx512vnni"))
    fmt::print("int8 AVX-512 VNNI (vpdpbusd), {} threads: {:.0f} GOP/s\n", threads,
               best_rate(threads, rounds, 128, [](long n) { return vnni_steps(n); }));
  else
    fmt::print("int8: this CPU has no AVX-512 VNNI\n");
  return 0;
}
#else
int main() {
  fmt::print("cpu_peak_bench: x86-64 only\n");
  return 0;
}
#endif
