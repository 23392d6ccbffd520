// Internal interface between attention.cc (checks, threads, row operations) and the per-ISA
// matrix products of its blocked path (attention_simd.h, compiled in attention_avx2.cc and
// attention_avx512.cc).
#pragma once

#include <cstdint>

namespace braid::kernels::cpu {

// C[m, n] = (accumulate ? C : 0) + sum_{p < k} A(i, p) B[p, j], with A(i, p) =
// a[i * a_rs + p * a_cs] (row-major A: a_rs = lda, a_cs = 1; transposed: a_rs = 1, a_cs = lda)
// and B, C row-major. Every C element is one chain of fused multiply-adds over p = 0 .. k-1 in
// order, whatever the tiling or the SIMD level, so the blocked attention path gives the same
// bits on every level (and the per-element results do not depend on m, n or the position).
// All f32, dense small tiles (no packing: the operands are cache-resident per-head copies).
struct AttnMatmul {
  int64_t m, n, k;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};
using AttnMatmulFn = void (*)(const AttnMatmul&);

// The bf16 row steps of attention_rows.h when the score divisor is a power of two
// (RowParams::recip_exact), per SIMD level. rnd(x) is x rounded to bf16 (nearest even, NaN
// quieted) and widened back; every step is integer rounding and IEEE products, so every level
// gives the scalar loops' bits:
//   scale:  s[j] = rnd(rnd(s[j]) * recip)
//   round:  out[j] = rnd(x[j])                          (out may be x)
//   grad:   dp[j] = rnd(rnd(p[j] * (dp[j] - dot)) * recip)
struct AttnRowsBf16 {
  void (*scale)(float* s, int64_t len, float recip);
  void (*round)(const float* x, float* out, int64_t len);
  void (*grad)(const float* p, float* dp, int64_t len, float dot, float recip);
};

namespace scalar {
void attn_matmul(const AttnMatmul& g);
extern const AttnRowsBf16 kAttnRowsBf16;
}  // namespace scalar
namespace avx2 {
void attn_matmul(const AttnMatmul& g);
}  // namespace avx2
namespace avx512 {
void attn_matmul(const AttnMatmul& g);
extern const AttnRowsBf16 kAttnRowsBf16;
}  // namespace avx512

}  // namespace braid::kernels::cpu
