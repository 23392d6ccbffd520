// AVX-512 reductions and softmax: the Ops of reduce_simd.h over ZMM registers (16 f32 or
// 8 f64 lanes). Compiled with the AVX-512 F/BW/DQ/VL flags (kernels/CMakeLists.txt).
#include <immintrin.h>

#include <type_traits>

#include "reduce_simd.h"

namespace braid::kernels::cpu::avx512 {
namespace {

struct OpsF {
  using Acc = float;
  using V = __m512;
  static constexpr int W = 16;
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  template <typename T>
  static V load_cvt(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_loadu_ps(p);
    } else if constexpr (std::is_same_v<T, half>) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      static_assert(std::is_same_v<T, bfloat16>);
      const __m512i w =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // p[0, n) (n < W) and `fill` in the other lanes, without reading past p + n.
  static V load_tail(const float* p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), static_cast<__mmask16>((1u << n) - 1), p);
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V max_nan(V acc, V x) {
    const __mmask16 m =
        _mm512_cmp_ps_mask(x, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(m, acc, x);
  }
  static V min_nan(V acc, V x) {
    const __mmask16 m =
        _mm512_cmp_ps_mask(x, acc, _CMP_LT_OQ) | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(m, acc, x);
  }
  static V clamp(V x, float lo, float hi) {
    return _mm512_min_ps(_mm512_max_ps(x, set1(lo)), set1(hi));
  }
  static V round(V x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V scale2(V y, V n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const V s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const V s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(y, s1), s2);
  }
  static V special(V x, V r, float lo) {
    r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, set1(lo), _CMP_LT_OQ), r, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
  }
};

struct OpsD {
  using Acc = double;
  using V = __m512d;
  static constexpr int W = 8;
  static V set1(double v) { return _mm512_set1_pd(v); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  template <typename T>
  static V load_cvt(const T* p) {
    if constexpr (std::is_same_v<T, double>) {
      return _mm512_loadu_pd(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return _mm512_cvtps_pd(_mm256_loadu_ps(p));
    } else if constexpr (std::is_same_v<T, half>) {
      return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    } else {
      static_assert(std::is_same_v<T, bfloat16>);
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
  }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V add(V a, V b) { return _mm512_add_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V max_nan(V acc, V x) {
    const __mmask8 m =
        _mm512_cmp_pd_mask(x, acc, _CMP_GT_OQ) | _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(m, acc, x);
  }
  static V min_nan(V acc, V x) {
    const __mmask8 m =
        _mm512_cmp_pd_mask(x, acc, _CMP_LT_OQ) | _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(m, acc, x);
  }
};

}  // namespace

void reduce(const ReduceJob& job) {
  reduce_dispatch<OpsF, OpsD>(job);
}

void softmax_row(const float* x, float* out, int64_t len, bool log) {
  softmax_row_simd<OpsF>(x, out, len, log);
}

}  // namespace braid::kernels::cpu::avx512
