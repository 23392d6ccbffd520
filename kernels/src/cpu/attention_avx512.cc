// The blocked attention path's f32 products at the AVX-512 level (attention_simd.h).
#include <immintrin.h>

#include "attention_simd.h"

namespace braid::kernels::cpu::avx512 {
namespace {

struct V512 {
  static constexpr int kW = 16;
  using F = __m512;
  using M = __mmask16;
  static M mask(int n) { return static_cast<M>((1u << n) - 1u); }  // n < 16
  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load_mask(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_mask(float* p, M m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
};

}  // namespace

// 8 x 32 tiles: 16 accumulators of the 32 registers.
void attn_matmul(const AttnMatmul& g) {
  attn_matmul_impl<V512, 8>(g);
}

}  // namespace braid::kernels::cpu::avx512
