// SPDX-License-Identifier: Apache-2.0
// CPU kernels: raw pointers, element counts and dtypes; no Tensor inside (design.md,
// "Kernels"). Every entry point dispatches at run time to the widest SIMD path the CPU has
// (cpu_dispatch_isa(): cpu_active_isa(), capped by BRAID_CPU_ISA or a ScopedCpuIsa); the
// kScalar level is the reference the tests compare every SIMD level against
// (docs/kernels.md).
//
// Conventions:
//   - counts and strides are in elements (int64_t), never bytes; sizes of 0 are valid.
//   - float16 / bfloat16 / fp8 data are loaded to f32, computed in f32 and rounded once on
//     store (round to nearest even).
//   - reductions accumulate in a fixed order that does not depend on the SIMD path
//     (docs/reductions-and-gemm.md, "Reduction order"), so every path gives the same bits.
//   - unsupported dtype combinations throw Error(kNotSupported) naming the kernel and dtype.
#pragma once

#include <cstdint>

#include "braid/core/cpu_features.h"
#include "braid/core/dtype.h"
#include "braid/kernels/types.h"

namespace braid::kernels::cpu {

// The vocabulary every device shares lives in types.h; the cpu names stay valid.
using kernels::ActivationGrad;
using kernels::AttentionArgs;
using kernels::BinaryOp;
using kernels::CastMode;
using kernels::GemmArgs;
using kernels::ReduceOp;
using kernels::Trans;
using kernels::UnaryOp;

// ---- data movement ----------------------------------------------------------------------

// dst[i] = convert(src[i]) for n contiguous elements, between any two dtypes of the table.
// Float targets round to nearest even, once (f64 / i32 / i64 sources reach the 16- and
// 8-bit formats through f32 rounded to odd); fp8 targets follow float_types.h (overflow to
// NaN for e4m3fn, to Inf for e5m2) unless mode is kSaturate. Float -> integer truncates
// toward zero and saturates: NaN -> 0, out of range and +-Inf -> the nearest limit (as Rust's
// `as`). Integer -> integer wraps (as C++ / torch); bool targets are (x != 0). Same dtype:
// a copy (src and dst may overlap). Every SIMD path is bit-identical to the scalar one.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
          CastMode mode = CastMode::kDefault);

// Gathers a strided n-d view into contiguous memory: dst is dense in row-major order.
void copy_strided(const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                  const int64_t* src_strides, void* dst);
// Scatters contiguous src into a strided n-d destination (the inverse of copy_strided).
void copy_to_strided(const void* src, int64_t elem_size, int ndim, const int64_t* shape, void* dst,
                     const int64_t* dst_strides);

// dst[i] = value (converted to dtype as cast() would), n elements.
void fill(void* dst, DType dtype, int64_t n, double value);

// memcpy of `bytes` (no overlap) whose stores bypass the caches (non-temporal, then a store
// fence): for large copies whose destination nobody reads soon, it saves the read of every
// destination line before it is written and keeps the source's lines in cache. Same bytes as
// memcpy; any alignment (the unaligned head and tail are copied normally).
void copy_nontemporal(void* dst, const void* src, int64_t bytes);

// ---- elementwise ------------------------------------------------------------------------

// out[idx] = a[idx] op b[idx] over an n-d index space `shape` (ndim >= 0; ndim == 0 is one
// element). a_strides / b_strides may hold 0 to broadcast; out is contiguous. All three share
// `dtype` (f64, f32, f16, bf16, i64, i32; others throw kNotSupported).
// max / min propagate NaN as torch.maximum / torch.minimum do (a NaN a wins, then a NaN b);
// between equal values (-0 and +0) they return b. Integer add / sub / mul wrap; integer div
// truncates toward zero, min / -1 wraps to min, and a zero divisor throws kInvalidArgument
// (out may then be partly written). Results are bit-identical across SIMD levels.
void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out);

// out[i] = alpha * x[i] + beta * y[i], contiguous, n elements; out may alias x or y.
// Float dtypes only. beta == 0 does not read y (it may be null), as BLAS.
void axpby(DType dtype, int64_t n, double alpha, const void* x, double beta, const void* y,
           void* out);
// out[i] = alpha * x[i]; out may alias x.
void scale(DType dtype, int64_t n, double alpha, const void* x, void* out);

// out[i] = op(x[i]), contiguous; out may alias x. Float dtypes only. The scalar level computes
// in double with <cmath> and rounds once; the SIMD levels (f32, f16, bf16) use polynomial
// approximations whose error bounds docs/kernels.md lists.
void unary(UnaryOp op, DType dtype, int64_t n, const void* x, void* out);

// ---- reductions ---------------------------------------------------------------------------

// Reduces the middle axis of a contiguous [outer, len, inner] array:
//   out[o, i] = reduce_{k < len} x[o, k, i]
// dtypes: f64, f32, f16, bf16 (every op); i64, i32 (sum, max, min; mean / norm throw
// kNotSupported). `out_dtype` is the input dtype or a wider float (f32 for f16 / bf16, f64
// for any float); for integers the input dtype or i64 (sums wrap, as torch). Float inputs
// accumulate in f32 (f64 for f64 input, or when `out_dtype` is f64) and are rounded once to
// out_dtype. The order is fixed (docs/reductions-and-gemm.md, "Reduction order"), so every
// SIMD level gives the same bits. len == 0 gives 0 for sum and norm, NaN for mean; max / min
// throw kInvalidArgument. max / min propagate NaN. outer or inner == 0 writes nothing.
void reduce(ReduceOp op, DType dtype, int64_t outer, int64_t len, int64_t inner, const void* x,
            DType out_dtype, void* out);

// Softmax (or log-softmax) over the last axis of a contiguous [rows, len] array, computed
// in f32 (f64 for f64) with max subtraction; f16 / bf16 are widened and rounded once on
// store. out may alias x. A row of only -Inf gives NaN (as torch); a NaN makes its row NaN.
// SIMD levels differ from kScalar by a few ulps (vector exp; docs/reductions-and-gemm.md).
void softmax(DType dtype, int64_t rows, int64_t len, const void* x, void* out, bool log);

// ---- GEMM ---------------------------------------------------------------------------------

// Row-major GEMM. f16 / bf16 inputs are accumulated in f32. beta == 0 ignores C's contents
// (NaN in C does not propagate). lda is at least the row length of the stored A (k, or m
// when transposed), ldb likewise (n, or k), ldc >= n. Batch strides may be 0 for A and B
// (broadcast); the C items must not overlap. Results depend on the SIMD level by rounding
// only (docs/reductions-and-gemm.md, "GEMM").
void gemm(const GemmArgs& args);

// ---- layers (nn) ----------------------------------------------------------------------------
// The fused kernels behind nn/'s layers and losses (docs/kernels.md, "Layer kernels"). Arrays
// are contiguous, row-major [rows, d]. Unless a kernel says otherwise, `dtype` is f32 or f64
// and every pointer has that dtype (the layers widen f16 / bf16 data to f32 first); other
// dtypes throw kNotSupported. Per-row statistics and parameter gradients (column sums) are
// accumulated in the dtype, rows in order 0, 1, ..., so results are the same bits on every run.
// Null pointers are allowed only for the optional outputs / parameters named below.

// LayerNorm over the last axis: per row mean = sum(x) / d, var = sum((x - mean)^2) / d (two
// passes), rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * w + b. w and b may be null
// (1 and 0). mean and rstd (rows values each) are what the backward needs.
void layer_norm_forward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                        const void* b, double eps, void* y, void* mean, void* rstd);
// With xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dw[j] = sum_rows dy * xhat,  db[j] = sum_rows dy   (overwritten, not accumulated)
// dx, dw, db may each be null (not wanted); w may be null (1).
void layer_norm_backward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                         const void* mean, const void* rstd, const void* dy, void* dx, void* dw,
                         void* db);

// RMSNorm (LLaMA): rstd = 1 / sqrt(sum(x^2) / d + eps), y = x * rstd * w (w may be null).
void rms_norm_forward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                      double eps, void* y, void* rstd);
// With xhat = x * rstd, g = dy * w: dx = rstd * (g - xhat * mean_j(g * xhat)),
// dw[j] = sum_rows dy * xhat (overwritten). dx, dw may be null; w may be null (1).
void rms_norm_backward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                       const void* rstd, const void* dy, void* dx, void* dw);

// dx[i] = dy[i] * f'(x[i]) for n contiguous elements of `dtype` (f64, f32, f16, bf16; all
// three arrays share it; dx may alias dy). relu: f' = (x > 0); gelu: Phi(x) + x phi(x);
// gelu_tanh: the derivative of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); silu:
// s (1 + x (1 - s)), s = sigmoid(x). The scalar level computes in double and rounds once;
// the SIMD levels compute f32 / f16 / bf16 in f32 with the vector math of unary() (error
// bounds in docs/kernels.md).
void activation_backward(ActivationGrad op, DType dtype, int64_t n, const void* x, const void* dy,
                         void* dx);

// out[i] = keep[i] ? x[i] * scale : 0 (dropout's forward and backward), n elements of `dtype`
// (f64, f32, f16, bf16; f16 / bf16 computed in f32, scale rounded to f32). out may alias x.
void masked_scale(DType dtype, int64_t n, const void* x, const uint8_t* keep, double scale,
                  void* out);

// Embedding lookup: out[i, :] = weight[ids[i], :] for n ids (i64 or i32, `id_dtype`); weight
// [num, dim] and out of `dtype` (any dtype: rows are copied bytes). An id outside [0, num)
// throws kOutOfRange naming it and its position (out may then be partly written).
void embedding_forward(DType dtype, int64_t num, int64_t dim, const void* weight, DType id_dtype,
                       const void* ids, int64_t n, void* out);
// Ordered scatter-add: dweight[ids[i], :] += dy[i, :] for i = 0, 1, ..., n - 1 in that order
// (f32 or f64). dweight is not cleared first. Ids are checked as in embedding_forward.
void embedding_backward(DType dtype, int64_t num, int64_t dim, DType id_dtype, const void* ids,
                        int64_t n, const void* dy, void* dweight);

// Cross-entropy over the last axis of logits [rows, classes] (f64, f32, f16, bf16) with
// class-index targets (`target_dtype` i64 or i32). Computed in f64 for f64 logits, else in
// f32; loss and lse (rows values each) are in that compute dtype. Per row with target t:
//   lse = max + log(sum_c exp(z_c - max)),
//   loss = (1 - ls) (lse - z_t) + ls / C * (C lse - sum_c z_c)    (ls = label_smoothing,
//   torch's formula). Rows whose target is ignore_index get loss 0 and lse 0. A target
// outside [0, classes) that is not ignore_index throws kOutOfRange naming it and its row.
void cross_entropy_forward(DType logits_dtype, int64_t rows, int64_t classes, const void* logits,
                           DType target_dtype, const void* targets, int64_t ignore_index,
                           double label_smoothing, void* loss, void* lse);
// dlogits[r, c] = scale[r] * (exp(z_c - lse_r) - (1 - ls) [c == t_r] - ls / C), in the logits'
// dtype; rows with an ignored target get 0. scale and lse are in the compute dtype (as the
// forward's). dlogits may alias logits.
void cross_entropy_backward(DType logits_dtype, int64_t rows, int64_t classes, const void* logits,
                            DType target_dtype, const void* targets, int64_t ignore_index,
                            double label_smoothing, const void* lse, const void* scale,
                            void* dlogits);

// ---- end of layers (nn) ---------------------------------------------------------------------

// ---- attention ----------------------------------------------------------------------------
// Causal multi-head self-attention core (GPT-2's, docs/nn.md "GPT"), fused per (batch, head):
// scores only for the causal triangle, softmax rows in f32 (f64 for f64), no T x T tensor
// kept between forward and backward (backward recomputes the scores block by block, with
// the same code, so it sees the forward's probabilities bit for bit).
//
// Layouts are GPT-2's: qkv is [B, T, 3 * C] (C = n_head * head_dim), q | k | v, head h at
// columns h * head_dim of each third (c_attn's output); out is [B, T, C] with the heads merged
// (c_proj's input). For each (b, h):
//   S = q k^T / sqrt(head_dim), S[i, j] = -inf for j > i;   P = softmax_rows(S)
//   P' = dropout(P);   out = P' v
// f16 / bf16 round where torch's autocast rounds (q k^T, the division, P cast to the value
// dtype, P' v; in backward dP' = dout v^T, the softmax input gradient, its division and
// dq) and compute everything else in f32.
//
// Dropout: element (b, h, i, j) is kept when word  w = ((b * n_head + h) * T + i) * T + j  of
// the Philox stream (dropout_seed, dropout_offset) (docs/rng.md), as a uniform
// (word >> 8) * 2^-24, is >= dropout_p; kept values are scaled by 1 / (1 - dropout_p). A
// caller takes the B * n_head * T * T words from a Generator (offset += that count rounded up
// to 4) and passes the same (seed, offset) to backward.
//
// Threads: the (b, h) pairs go to braid's intra-op threads (parallel_for,
// core/thread_pool.h); each pair is computed by the same code on whichever thread takes it,
// so the bits do not depend on the thread count. The scalar level (CpuIsa::kScalar) is the
// reference: plain loops over whole rows; the SIMD levels run the blocked path (row blocks of
// the triangle through a register-blocked f32 micro-kernel; gemm() for f64); at the amx level
// bf16 with head_dim % 32 == 0 multiplies the same blocks on AMX tiles (another summation
// order; docs/reductions-and-gemm.md, "Attention on AMX tiles").
// out[B, T, C] from qkv[B, T, 3C].
void causal_attention_forward(const AttentionArgs& args, const void* qkv, void* out);
// dqkv[B, T, 3C] (overwritten) from qkv and dout[B, T, C].
void causal_attention_backward(const AttentionArgs& args, const void* qkv, const void* dout,
                               void* dqkv);

}  // namespace braid::kernels::cpu
