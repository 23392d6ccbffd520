// The AVX-512 vector traits (16 f32 lanes, F/BW/DQ/VL) that elementwise_simd.h's templates are
// written against, and the AVX512_BF16 variant that rounds to bfloat16 with vcvtneps2bf16.
// Include only from *_avx512.cc / *_avx512bf16.cc files. Internal linkage on purpose: see
// Note [ISA files and the ODR] in elementwise_simd.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace braid::kernels::cpu {
namespace {

struct Avx512 {
  static constexpr int kW = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;

  // ---- f32 ----
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }  // a > b ? a : b
  static F min(F a, F b) { return _mm512_min_ps(a, b); }  // a < b ? a : b
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F round(F a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static F select(M m, F t, F f) { return _mm512_mask_blend_ps(m, f, t); }
  static bool any(M m) { return m != 0; }

  // ---- i32 lanes ----
  static I bits(F a) { return _mm512_castps_si512(a); }
  static F from_bits(I a) { return _mm512_castsi512_ps(a); }
  static I iset1(int32_t x) { return _mm512_set1_epi32(x); }
  static I iadd(I a, I b) { return _mm512_add_epi32(a, b); }
  static I isub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I iand(I a, I b) { return _mm512_and_si512(a, b); }
  static I ior(I a, I b) { return _mm512_or_si512(a, b); }
  static I ixor(I a, I b) { return _mm512_xor_si512(a, b); }
  template <int S>
  static I shl(I a) {
    return _mm512_slli_epi32(a, S);
  }
  template <int S>
  static I shr(I a) {
    return _mm512_srli_epi32(a, S);
  }
  static M igt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M ieq(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static M mand(M a, M b) { return static_cast<M>(a & b); }
  static M mnot(M a) { return static_cast<M>(~a); }
  static I iselect(M m, I t, I f) { return _mm512_mask_blend_epi32(m, f, t); }
  static I cvt_round(F a) { return _mm512_cvtps_epi32(a); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }

  // ---- narrow storage ----
  static I load_u16(const void* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static void store_u16(void* p, I v) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  static I load_u8(const void* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static void store_u8(void* p, I v) {
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
  }

  // ---- binary16 (Note [f16 NaN] in elementwise_simd.h) ----
  static F cvt_f16_to_f32(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static void cvt_f32_to_f16(void* p, F v) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    const __mmask16 nan = _mm256_cmpgt_epi16_mask(mag, _mm256_set1_epi16(0x7c00));
    const __m256i quiet =
        _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(-0x8000)), _mm256_set1_epi16(0x7e00));
    h = _mm256_mask_blend_epi16(nan, h, quiet);
    _mm256_storeu_si256(static_cast<__m256i*>(p), h);
  }
};

}  // namespace
}  // namespace braid::kernels::cpu
