// The blocked attention path's f32 products (attention_simd.h) and bf16 row steps
// (AttnRowsBf16, attention_impl.h) at the AVX-512 level.
#include <immintrin.h>

#include "attention_simd.h"
#include "elementwise_simd.h"
#include "elementwise_vec_avx512.h"

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

// x rounded to bf16 and widened back, as fp::f32_to_bf16_bits (attention_rows.h, rnd_bf16):
// elementwise_simd.h's lane rounding, shifted back into the high half.
__m512 rnd_bf16(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(f32_to_bf16_lanes<Avx512>(v), 16));
}

// f(j0, lanes) over [0, len) in vectors of 16, the tail masked.
template <typename F>
void rows_loop(int64_t len, F&& f) {
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) f(j, __mmask16(0xffff));
  if (j < len) f(j, static_cast<__mmask16>((1u << (len - j)) - 1u));
}

void scale_bf16(float* s, int64_t len, float recip) {
  const __m512 r = _mm512_set1_ps(recip);
  rows_loop(len, [&](int64_t j, __mmask16 m) {
    const __m512 x = _mm512_maskz_loadu_ps(m, s + j);
    _mm512_mask_storeu_ps(s + j, m, rnd_bf16(_mm512_mul_ps(rnd_bf16(x), r)));
  });
}

void round_bf16(const float* x, float* out, int64_t len) {
  rows_loop(len, [&](int64_t j, __mmask16 m) {
    _mm512_mask_storeu_ps(out + j, m, rnd_bf16(_mm512_maskz_loadu_ps(m, x + j)));
  });
}

void grad_bf16(const float* p, float* dp, int64_t len, float dot, float recip) {
  const __m512 r = _mm512_set1_ps(recip), d = _mm512_set1_ps(dot);
  rows_loop(len, [&](int64_t j, __mmask16 m) {
    const __m512 pj = _mm512_maskz_loadu_ps(m, p + j);
    const __m512 g = _mm512_mul_ps(pj, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), d));
    _mm512_mask_storeu_ps(dp + j, m, rnd_bf16(_mm512_mul_ps(rnd_bf16(g), r)));
  });
}

}  // namespace

// 8 x 32 tiles: 16 accumulators of the 32 registers.
void attn_matmul(const AttnMatmul& g) {
  attn_matmul_impl<V512, 8>(g);
}

const AttnRowsBf16 kAttnRowsBf16{scale_bf16, round_bf16, grad_bf16};

}  // namespace braid::kernels::cpu::avx512
