// Bit-packed sign arithmetic for XNOR-Net layers (ops/binary_convolution.cc,
// ops/binary_inner_product.cc): a vector of signs is stored one bit each (1 where x >= 0),
// 64 to a word, and the dot product of two such vectors of n signs is
// n - 2 * popcount(a XOR b). The products of many rows with many filters run as one
// "popcount GEMM", with AVX-512 VPOPCNTDQ (8 filters an instruction) where the CPU has it
// and the scalar popcount otherwise.
#pragma once

#include <cstdint>

namespace bks {

// Words holding n signs.
inline int64_t sign_words(int64_t n) { return (n + 63) / 64; }
// Filters are stored in groups of this many (the vector path takes 8 at a time).
inline int64_t padded_filters(int64_t n) { return (n + 7) / 8 * 8; }

// out[0, sign_words(n)) = the signs of x[0], x[stride], ... x[(n-1) stride]; bits past n
// are 0 (so two packed vectors agree there and add nothing to a popcount of their XOR).
void pack_signs(const float* x, int64_t n, int64_t stride, uint64_t* out);

// counts[i * n_pad + j] = popcount(a[i] XOR b[j]) over `words` words, for the m rows of a
// (row i at a + i * words) and the n_pad = padded_filters(n) filters of b, stored word-major
// (word w of filter j at bt[w * n_pad + j]; filters past n are padding, their counts unused).
void xor_popcount_gemm(const uint64_t* a, int64_t m, int64_t words, const uint64_t* bt, int64_t n_pad, int32_t* counts);

// Which popcount the GEMM uses: "AVX-512 VPOPCNTDQ" or "scalar popcount".
const char* popcount_path();
// Tests: use the scalar path even where the vector one exists (false restores the choice).
void force_scalar_popcount(bool scalar);

}  // namespace bks
