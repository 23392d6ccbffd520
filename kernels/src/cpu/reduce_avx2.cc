// AVX2 reductions and softmax: the Ops of reduce_simd.h over YMM registers (8 f32 or 4 f64
// lanes). Compiled with -mavx2 -mfma -mf16c (kernels/CMakeLists.txt).
#include <immintrin.h>

#include <type_traits>

#include "reduce_simd.h"

namespace braid::kernels::cpu::avx2 {
namespace {

inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}
inline __m128i load64(const void* p) {
  return _mm_loadl_epi64(static_cast<const __m128i*>(p));
}

struct OpsF {
  using Acc = float;
  using V = __m256;
  static constexpr int W = 8;
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  template <typename T>
  static V load_cvt(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm256_loadu_ps(p);
    } else if constexpr (std::is_same_v<T, half>) {
      return _mm256_cvtph_ps(load128(p));
    } else {
      static_assert(std::is_same_v<T, bfloat16>);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
    }
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // p[0, n) (n < W) and `fill` in the other lanes, without reading past p + n.
  static V load_tail(const float* p, int64_t n, float fill) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V max_nan(V acc, V x) {
    const V m = _mm256_or_ps(_mm256_cmp_ps(x, acc, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(acc, x, m);
  }
  static V min_nan(V acc, V x) {
    const V m = _mm256_or_ps(_mm256_cmp_ps(x, acc, _CMP_LT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(acc, x, m);
  }
  static V clamp(V x, float lo, float hi) {
    return _mm256_min_ps(_mm256_max_ps(x, set1(lo)), set1(hi));
  }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale2(V y, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
  }
  static V special(V x, V r, float lo) {
    r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x, set1(lo), _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
};

struct OpsD {
  using Acc = double;
  using V = __m256d;
  static constexpr int W = 4;
  static V set1(double v) { return _mm256_set1_pd(v); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  template <typename T>
  static V load_cvt(const T* p) {
    if constexpr (std::is_same_v<T, double>) {
      return _mm256_loadu_pd(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return _mm256_cvtps_pd(_mm_loadu_ps(p));
    } else if constexpr (std::is_same_v<T, half>) {
      return _mm256_cvtps_pd(_mm_cvtph_ps(load64(p)));
    } else {
      static_assert(std::is_same_v<T, bfloat16>);
      return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(load64(p)), 16)));
    }
  }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V max_nan(V acc, V x) {
    const V m = _mm256_or_pd(_mm256_cmp_pd(x, acc, _CMP_GT_OQ), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_pd(acc, x, m);
  }
  static V min_nan(V acc, V x) {
    const V m = _mm256_or_pd(_mm256_cmp_pd(x, acc, _CMP_LT_OQ), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_pd(acc, x, m);
  }
};

}  // namespace

void reduce(const ReduceJob& job) {
  reduce_dispatch<OpsF, OpsD>(job);
}

void softmax_row(const float* x, float* out, int64_t len, bool log) {
  softmax_row_simd<OpsF>(x, out, len, log);
}

}  // namespace braid::kernels::cpu::avx2
