// The SIMD levels of the quantization kernels (quant.cc holds the scalar reference and picks a
// level per call through IsaTable). Each level fills what it implements; the int8 dot products
// are exact integer sums and the 4-bit dequantization a table lookup of the same products, so
// every level gives the scalar path's bits.
#pragma once

#include <cstdint>

namespace braid::kernels::cpu {

// c[i, j] = sum_p a[i, p] * b[j, p] over int8 rows, int32 result; arguments already checked.
using GemmI8Fn = void (*)(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                          int32_t* c);
// y[2j], y[2j+1] = scaled[hi nibble], scaled[lo nibble] of packed[j], for `pairs` bytes.
using Dequant4PairsFn = void (*)(const float* scaled16, const uint8_t* packed, int64_t pairs,
                                 float* y);

// Elements [start, start + len) of a packed 4-bit tensor dequantized into y[0, len): per block,
// the 16 products code[c] * absmax[block] (the same f32 products at every level), then a lookup
// per nibble. start may be odd (a row of an odd-length weight) and blocks may end anywhere.
using Dequant4RangeFn = void (*)(const float* code, const uint8_t* packed, const float* absmax,
                                 int64_t blocksize, int64_t start, int64_t len, float* y);
// The fused 4-bit GEMM's inner block: y[i * ldy + j] = dot(x[i, :], w[j, :]) for i < m, j < r
// (x: m x k f32 rows, w: r x k f32 rows, the dequantized tile), in the order of Note [gemm_4bit
// order] (quant.cc): 16 lanes, lane l takes p = l (mod 16) with fma in increasing p (the tail
// padded with zeros), then the lanes folded 8, 4, 2, 1. Every level computes exactly this.
using Gemm4TileFn = void (*)(const float* x, int64_t m, const float* w, int64_t r, int64_t k,
                             float* y, int64_t ldy);
// The 4-bit input-gradient block: for each row i < m and tile row j < r in order,
// dx[i, :] = fma(dy[i * ldy + j], w[j, :], dx[i, :]) elementwise (one rounding per step; every
// level computes exactly this, lane by lane).
using Gemm4AxpyFn = void (*)(const float* dy, int64_t m, int64_t ldy, const float* w, int64_t r,
                             int64_t k, float* dx);
// LLM.int8's row absmax: max |x[c]| over the elements with |x[c]| < threshold (all of them when
// threshold is 0; NaN is skipped as std::max skips it); *outlier is set when some |x[c]| >=
// threshold > 0. Max is exact, so every level gives the same value.
using RowAbsmaxFn = float (*)(const float* x, int64_t n, float threshold, bool* outlier);
// q[c] = clamp(nearbyint(x[c] * scale), -127, 127) (round half to even; NaN gives 0, as the
// scalar static_cast of a NaN gives on x86).
using QuantRowI8Fn = void (*)(const float* x, int64_t n, float scale, int8_t* q);

struct QuantTable {
  GemmI8Fn gemm_i8 = nullptr;
  Dequant4PairsFn dequant4_pairs = nullptr;
  Dequant4RangeFn dequant4_range = nullptr;
  Gemm4TileFn gemm4_tile = nullptr;
  Gemm4AxpyFn gemm4_axpy = nullptr;
  RowAbsmaxFn row_absmax = nullptr;
  QuantRowI8Fn quant_row_i8 = nullptr;
};

namespace avx2 {
void fill_quant_table(QuantTable& t);
}
namespace avx512 {
void fill_quant_table(QuantTable& t);
}
namespace avx512bf16 {
// The amx level's 4-bit block (quant_avx512bf16.cc; Note [gemm_4bit on AMX] in quant.cc):
// y[i * ldy + j] for i < m, j < r (r <= 32) = sum_p x[i, p] * bf16(w[j, p]) on AMX tiles, x bf16
// bits (m x k rows), w the f32 dequantized tile (r x k rows), k a multiple of 32; y f32, or bf16
// rounded to nearest even when y_bf16. scratch: 96 * k elements. Between amx tile configuration
// and release (the caller's).
void gemm4_tile_amx(const uint16_t* x, int64_t m, const float* w, int64_t r, int64_t k, void* y,
                    int64_t ldy, bool y_bf16, uint16_t* scratch);
void gemm4_amx_begin();
void gemm4_amx_end();
}  // namespace avx512bf16

}  // namespace braid::kernels::cpu
