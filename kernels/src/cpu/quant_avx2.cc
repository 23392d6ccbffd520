// AVX2 int8 GEMM for LLM.int8: 16 int8 lanes widened to int16, pairwise products summed into
// int32 by vpmaddwd (exact: 2 * 127^2 fits), rows reduced at the end. 4-bit dequantization
// stays scalar at this level.
#include <immintrin.h>

#include "quant_impl.h"

namespace braid::kernels::cpu::avx2 {
namespace {

int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
  __m256i acc = _mm256_setzero_si256();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m256i va =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + p)));
    const __m256i vb =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + p)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  int32_t sum = 0;
  for (int32_t v : lanes) sum += v;
  for (; p < k; ++p) sum += int32_t{a[p]} * int32_t{b[p]};
  return sum;
}

void gemm_i8(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = dot_i8(a + i * k, b + j * k, k);
  }
}

}  // namespace

void fill_quant_table(QuantTable& t) {
  t.gemm_i8 = gemm_i8;
}

}  // namespace braid::kernels::cpu::avx2
