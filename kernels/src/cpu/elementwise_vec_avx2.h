// The AVX2 vector traits (8 f32 lanes) that elementwise_simd.h's templates are written
// against. Include only from *_avx2.cc files (they are compiled with -mavx2 -mfma -mf16c).
// Everything here has internal linkage: see Note [ISA files and the ODR] in
// elementwise_simd.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace braid::kernels::cpu {
namespace {

struct Avx2 {
  static constexpr int kW = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256i;  // all-ones lanes where true

  // ---- f32 ----
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // x86 semantics: a > b ? a : b (the second operand on NaN or equality)
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F round(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M isnan(F a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  static M lt(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static M eq(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
  static F select(M m, F t, F f) { return _mm256_blendv_ps(f, t, _mm256_castsi256_ps(m)); }
  static bool any(M m) { return !_mm256_testz_si256(m, m); }

  // ---- i32 lanes ----
  static I bits(F a) { return _mm256_castps_si256(a); }
  static F from_bits(I a) { return _mm256_castsi256_ps(a); }
  static I iset1(int32_t x) { return _mm256_set1_epi32(x); }
  static I iadd(I a, I b) { return _mm256_add_epi32(a, b); }
  static I isub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I iand(I a, I b) { return _mm256_and_si256(a, b); }
  static I ior(I a, I b) { return _mm256_or_si256(a, b); }
  static I ixor(I a, I b) { return _mm256_xor_si256(a, b); }
  template <int S>
  static I shl(I a) {
    return _mm256_slli_epi32(a, S);
  }
  template <int S>
  static I shr(I a) {
    return _mm256_srli_epi32(a, S);
  }                                                            // logical
  static M igt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }  // signed
  static M ieq(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static M mand(M a, M b) { return _mm256_and_si256(a, b); }
  static M mnot(M a) { return _mm256_xor_si256(a, _mm256_set1_epi32(-1)); }
  static I iselect(M m, I t, I f) { return _mm256_blendv_epi8(f, t, m); }
  static I cvt_round(F a) { return _mm256_cvtps_epi32(a); }  // MXCSR rounding: nearest even
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }

  // ---- narrow storage: 8 elements in, i32 lanes out (zero-extended) and back ----
  static I load_u16(const void* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static void store_u16(void* p, I v) {  // lanes hold values <= 0xffff
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xd8);
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static I load_u8(const void* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
  }
  static void store_u8(void* p, I v) {            // lanes hold values <= 0xff
    const __m256i w = _mm256_packus_epi32(v, v);  // [a0-3 a0-3 | a4-7 a4-7] as u16
    const __m256i b = _mm256_packus_epi16(w, w);  // each 128-bit half: 4 useful bytes first
    const __m128i lo = _mm256_castsi256_si128(b);
    const __m128i hi = _mm256_extracti128_si256(b, 1);
    _mm_storel_epi64(static_cast<__m128i*>(p), _mm_unpacklo_epi32(lo, hi));
  }

  // ---- binary16 through F16C: vcvtps2ph / vcvtph2ps, exact except NaN, which is fixed up
  // to float_types.h's rule (Note [f16 NaN] in elementwise_simd.h) ----
  static __m256 cvt_f16_to_f32(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static void cvt_f32_to_f16(void* p, F v) {
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    const __m128i nan = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7c00));
    const __m128i quiet =
        _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(-0x8000)), _mm_set1_epi16(0x7e00));
    h = _mm_blendv_epi8(h, quiet, nan);
    _mm_storeu_si128(static_cast<__m128i*>(p), h);
  }
};

}  // namespace
}  // namespace braid::kernels::cpu
