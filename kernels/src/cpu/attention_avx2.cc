// The blocked attention path's f32 products at the AVX2 level (attention_simd.h).
#include <immintrin.h>

#include "attention_simd.h"

namespace braid::kernels::cpu::avx2 {
namespace {

struct V256 {
  static constexpr int kW = 8;
  using F = __m256;
  using M = __m256i;
  static M mask(int n) {  // lanes < n set
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load_mask(const float* p, M m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_mask(float* p, M m, F v) { _mm256_maskstore_ps(p, m, v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
};

}  // namespace

// 6 x 16 tiles: 12 accumulators of the 16 registers.
void attn_matmul(const AttnMatmul& g) {
  attn_matmul_impl<V256, 6>(g);
}

}  // namespace braid::kernels::cpu::avx2
