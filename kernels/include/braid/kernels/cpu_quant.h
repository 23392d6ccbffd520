// SPDX-License-Identifier: Apache-2.0
// CPU quantization kernels in bitsandbytes' formats (docs/quantization.md): block-wise 4-bit
// NF4 / FP4 with an f32 absmax per block, block-wise 8-bit "dynamic" quantization (what
// bitsandbytes' double quantization applies to the 4-bit absmax), and LLM.int8's row-wise
// absmax int8 with an int8 x int8 -> int32 GEMM and outlier columns kept in f32.
//
// Raw pointers and element counts, no Tensor inside (design.md, "Kernels"). A scalar reference;
// gemm_i8_i32, dequantize_4bit, quantize_int8_rows and gemm_4bit also have AVX2 and AVX-512
// levels picked per call as cpu.h's kernels are, with the scalar bits. The kernel table
// (table.h) exposes them as the quant ops of every device. Like cpu.h this
// header is a device's own: only kernels/ and tensor/ include it (cmake/check_layering.py);
// layers above reach it through braid/tensor/quant.h.
//
// The algorithms follow bitsandbytes' published CUDA kernels (csrc/kernels.cu:
// dQuantizeNF4, dQuantizeFP4, dQuantize<0>, kQuantizeBlockwise, kDequantizeBlockwise) and
// bitsandbytes/functional.py (get_4bit_type, create_dynamic_map, quantize_4bit,
// int8_vectorwise_quant, int8_mm_dequant); the numbers are checked against
// tests/reference/gen_bnb_reference.py, which reimplements the same published algorithm.
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/kernels/types.h"

namespace braid::kernels::cpu {

// bitsandbytes' two 4-bit data types (bnb_4bit_quant_type "nf4" / "fp4"), types.h's.
using Quant4Type = kernels::Quant4Type;

// The 16 code values of a 4-bit type in code order (bitsandbytes' quant_map): NF4 from
// get_4bit_type("nf4"); FP4 = {0, 0.0625, 8, 12, 4, 6, 2, 3, 0, -0.0625, -8, -12, -4, -6, -2, -3}
// divided by 12 in f32 (entry 8 is +0 in bitsandbytes' table too). Dequantization is code[q] *
// absmax.
const float* quant4_code(Quant4Type type);

// bitsandbytes' create_dynamic_map(signed=True): the 256 sorted f32 values of the signed 8-bit
// dynamic code that quantize_blockwise uses by default (and so double quantization).
const float* dynamic_code_signed();

// Block-wise 4-bit quantization of n f32 values, block `blocksize` (> 0, even; bitsandbytes
// uses 64): absmax[b] = max |x| over block b (ceil(n / blocksize) blocks, the last may be
// short); each x * (1 / absmax) goes to its nearest code through bitsandbytes' comparison
// tree (strict '>' at the midpoints; FP4 keeps the sign bit for negative inputs, so -0.001
// becomes -0); packed[i / 2] holds element i in its high nibble when i is even, as
// bitsandbytes packs it. packed has (n + 1) / 2 bytes; an odd n leaves the last low nibble 0.
void quantize_4bit(Quant4Type type, const float* x, int64_t n, int64_t blocksize, uint8_t* packed,
                   float* absmax);

// y[i] = code[nibble i] * absmax[i / blocksize] for n elements; `code` has 16 entries
// (quant4_code(), or the quant_map a checkpoint stores).
void dequantize_4bit(const float* code, const uint8_t* packed, const float* absmax, int64_t n,
                     int64_t blocksize, float* y);

// Block-wise 8-bit quantization with a 256-entry sorted code (dynamic_code_signed()):
// absmax[b] = max |x| over the block, q[i] = the code index dQuantize<0> picks for
// x * (1 / absmax) (a 7-step binary search, then the nearer neighbour by midpoint).
void quantize_blockwise_8bit(const float* code, const float* x, int64_t n, int64_t blocksize,
                             uint8_t* q, float* absmax);
// y[i] = code[q[i]] * absmax[i / blocksize].
void dequantize_blockwise_8bit(const float* code, const uint8_t* q, const float* absmax, int64_t n,
                               int64_t blocksize, float* y);

// Fused 4-bit dequant-GEMM (bitsandbytes' gemv_4bit / matmul_4bit): y (m x n) = x (m x k) · Wᵀ,
// where W (n x k, row-major: n * k elements flattened in C order) is stored as quantize_4bit
// writes it (packed codes, f32 absmax per block of `blocksize`, `code` its 16 values). W is never
// materialized: tiles of gemm_4bit_tile_rows(k) rows (about 24 KiB of f32) are dequantized into a
// buffer, with the bits dequantize_4bit gives, and multiplied in f32. x_dtype and y_dtype are f32,
// bf16 or f16: x is widened to f32 once, y rounded once (to nearest even) at the end.
// Summation order (Note [gemm_4bit order] in quant.cc): 16 lanes of fused multiply-adds folded in
// a fixed tree, the same at every SIMD level and thread count (same bits); against
// dequantize_4bit + gemm() the products are identical and the order differs, each within
// (ceil(k / 16) + 4) * 2^-24 * sum |x_p w_p| of the exact dot product. Threads: tiles are spread
// by parallel_for (one run of tiles and one tile buffer per thread). At the amx level a bf16 x of
// at least 32 rows with k % 32 == 0 (y bf16 or f32) instead rounds each dequantized tile of 32
// rows to bf16 and multiplies on AMX tiles, as bitsandbytes' matmul_4bit does for a bf16 input
// (Note [gemm_4bit on AMX] in quant.cc): other bits, the same for any thread count.
void gemm_4bit(const float* code, const uint8_t* packed, const float* absmax, int64_t blocksize,
               int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype, void* y,
               DType y_dtype);
// y (m x k) = x (m x n) · W for the same 4-bit W (n x k), not transposed: the input gradient of
// a 4-bit Linear (dx = dy · W) without materializing W. Tiles as gemm_4bit's; each y element is
// the sequential sum over j = 0..n-1 of fma(x[i, j], W[j, p], acc) from 0, the same at every SIMD
// level and thread count (threads take runs of rows of x). Against dequantize + gemm(): within
// n * 2^-24 * sum_j |x_ij W_jp| of the exact sum. Dtypes as gemm_4bit's.
void gemm_4bit_nn(const float* code, const uint8_t* packed, const float* absmax, int64_t blocksize,
                  int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype, void* y,
                  DType y_dtype);
// The rows of W one gemm_4bit tile holds (so its extra memory is this * k * 4 bytes per thread).
int64_t gemm_4bit_tile_rows(int64_t k);

// LLM.int8 vector-wise quantization of a rows x cols row-major matrix (bitsandbytes'
// int8_vectorwise_quant): with threshold 0, absmax[r] = max |x| over row r (SCB / row_stats)
// and q = round-to-nearest-even(x * (127 / absmax[r])); a row of zeros gives absmax 0, q 0.
// With threshold > 0, elements with |x| >= threshold are outliers: they are left out of the
// row absmax, and every column holding one is quantized to 0 in all rows; those column
// indices are written in increasing order to outlier_cols (room for cols entries; may be null
// when threshold is 0). Returns the number of outlier columns.
int64_t quantize_int8_rows(const float* x, int64_t rows, int64_t cols, float threshold, int8_t* q,
                           float* absmax, int64_t* outlier_cols);

// c[i, j] = sum_k a[i, k] * b[j, k] in int32 (a: m x k, b: n x k, both row-major int8;
// c: m x n). Exact while k * 127 * 127 < 2^31, that is k < 133,000; larger k is refused.
void gemm_i8_i32(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c);

// LLM.int8 linear without bias: y (m x n, f32) = x (m x k, f32) @ W^T where W (n x k) is stored
// as int8 `cb` with row absmax `scb` (quantize_int8_rows with threshold 0). x is quantized
// row-wise with `threshold` (> 0 enables the decomposition, 0 turns it off); the int8 part
// goes through gemm_i8_i32 and is rescaled as int8_mm_dequant does, acc * (absmax_x[i] *
// scb[j]) * 6.200124e-05 (1 / 127^2); the outlier columns j are multiplied in f32 against
// W's dequantized columns cb[:, j] * scb / 127 and added. Returns the number of outlier
// columns.
int64_t int8_linear(const float* x, int64_t m, int64_t k, const int8_t* cb, const float* scb,
                    int64_t n, float threshold, float* y);

}  // namespace braid::kernels::cpu
