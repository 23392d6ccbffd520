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

// The amx level's bf16 products (attention_avx512bf16.cc, docs/reductions-and-gemm.md
// "Attention on AMX tiles"): C[m, n] (+)= A B with A row-major bf16 bits (row stride lda
// elements) and B in the k-pair layout (bf16_tiles.h: pair row q holds (b[2q, j], b[2q + 1, j])
// for j in order; pair-row stride ldb elements), C f32 row-major. m, n and k are multiples of
// 32 (the caller pads with zeros). Each C element adds its k terms 32 at a time in order
// (TDPBF16PS), so the bits depend on the inputs only. Between attn_amx_begin() and
// attn_amx_end() on one thread (the tile configuration is per thread).
struct AttnAmxMatmul {
  int64_t m, n, k;
  const uint16_t* a;
  int64_t lda;
  const uint16_t* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};

namespace avx512bf16 {
void attn_amx_begin();
void attn_amx_end();
void attn_matmul_amx(const AttnAmxMatmul& g);
// The same product with vdpbf16ps (AVX512_BF16 without AMX); another summation order.
void attn_matmul_dpbf16(const AttnAmxMatmul& g);
// dst[0, n) = the bf16 bits of src[0, n) (values already rounded to bf16: exact), then
// zeros up to n_pad.
void attn_bf16_bits(const float* src, int64_t n, int64_t n_pad, uint16_t* dst);
// The pair row of two f32 rows already rounded to bf16: dst[2 j] = r0[j], dst[2 j + 1] = r1[j]
// for j < n (r1 null: zeros), zeros for j in [n, n_pad); n_pad a multiple of 32.
void attn_bf16_pairs(const float* r0, const float* r1, int64_t n, int64_t n_pad, uint16_t* dst);
// dst [tp][hd] = rows [0, t) of src (row stride ld elements), zero rows [t, tp); hd a multiple
// of 32.
void attn_copy_rows(const uint16_t* src, int64_t ld, int64_t t, int64_t tp, int64_t hd,
                    uint16_t* dst);
// dst [cols][rows] (row stride ldd) = src [rows][cols] (row stride lds) transposed, 32-bit
// words; rows and cols multiples of 16.
void attn_transpose32(const uint32_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* dst,
                      int64_t ldd);
// Row pairs: dst [rows/2][cols][2] from src [rows][cols] (dense, 16-bit); rows even, cols a
// multiple of 32.
void attn_row_pairs(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst);
// sum_j a[j] b[j] in 16 lanes (lane j % 16: products added in j order, one rounding each),
// then the lanes folded by halves (lane i + lane i + 8, ...): the amx path's softmax-gradient
// sum, in one fixed order.
float attn_dot(const float* a, const float* b, int64_t len);
}  // namespace avx512bf16

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
