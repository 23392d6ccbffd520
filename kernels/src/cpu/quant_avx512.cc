// AVX-512 quantization kernels: the int8 GEMM with 32 int8 lanes widened to int16 and summed by
// vpmaddwd; 4-bit dequantization as a 16-entry vpermps lookup of the block's scaled code table
// (the same products the scalar path stores, so the same bits).
#include <immintrin.h>

#include "quant_impl.h"

namespace braid::kernels::cpu::avx512 {
namespace {

int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
  __m512i acc = _mm512_setzero_si512();
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) {
    const __m512i va =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + p)));
    const __m512i vb =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p)));
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(va, vb));
  }
  int32_t sum = _mm512_reduce_add_epi32(acc);
  for (; p < k; ++p) sum += int32_t{a[p]} * int32_t{b[p]};
  return sum;
}

void gemm_i8(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = dot_i8(a + i * k, b + j * k, k);
  }
}

// 8 packed bytes -> 16 floats: nibble indices interleaved hi, lo, hi, lo, ...
void dequant4_pairs(const float* scaled16, const uint8_t* packed, int64_t pairs, float* y) {
  const __m512 table = _mm512_loadu_ps(scaled16);
  int64_t j = 0;
  for (; j + 8 <= pairs; j += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + j));
    const __m512i b32 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));  // b0 b0 b1 b1 ..
    const __m512i hi = _mm512_srli_epi32(b32, 4);
    const __m512i lo = _mm512_and_si512(b32, _mm512_set1_epi32(0x0F));
    // Even lanes take the high nibble, odd lanes the low one.
    const __m512i idx = _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), hi, lo);
    _mm512_storeu_ps(y + 2 * j, _mm512_permutexvar_ps(idx, table));
  }
  for (; j < pairs; ++j) {
    y[2 * j] = scaled16[packed[j] >> 4];
    y[2 * j + 1] = scaled16[packed[j] & 0x0F];
  }
}

}  // namespace

void fill_quant_table(QuantTable& t) {
  t.gemm_i8 = gemm_i8;
  t.dequant4_pairs = dequant4_pairs;
}

}  // namespace braid::kernels::cpu::avx512
