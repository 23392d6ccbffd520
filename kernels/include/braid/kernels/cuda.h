// SPDX-License-Identifier: Apache-2.0
// GPU kernels (NVIDIA, through the CUDA runtime and cuBLASLt): the device side of the fused
// optimizer and mixed-precision kernels of braid/kernels/optim.h, and fp8 / 16-bit GEMM.
// Built into braid_kernels only when BRAID_HAVE_CUDA (braid/core/config.h); include this header
// under `#if BRAID_HAVE_CUDA`. docs/gpu.md describes the build and what has been run where.
//
// Conventions (as the CPU kernels, docs/kernels.md, plus):
//   - Pointers inside descriptors are device pointers; descriptor arrays themselves
//     (OptimTensor[], data[], counts[]) are host memory, read during the call only.
//   - `stream` is a cudaStream_t passed as void* (nullptr: the legacy default stream), so this
//     header needs no CUDA include. Work is enqueued on it and the call returns without
//     waiting, unless the function says otherwise.
//   - The current device (cudaSetDevice) must be the one owning the pointers and the stream.
//   - Bad arguments throw braid::Error before anything is enqueued. A failing CUDA or cuBLASLt
//     call throws braid::Error naming the call and CUDA's error text: kOutOfMemory for an
//     allocation, kNotSupported for no device / no kernel image / a too-old driver,
//     kInvalidArgument for invalid values or pointers, kInternal otherwise (errors raised by
//     a kernel are sticky: the CUDA context is then unusable).
//
//   braid::kernels::OptimStep step;             // AdamW, lr 1e-3, ...
//   step.param_dtype = braid::DType::kBF16;
//   braid::kernels::OptimTensor t{.n = n, .param = d_param, .master = d_master,
//                                 .grad = d_grad, .state0 = d_m, .state1 = d_v};
//   braid::kernels::cuda::optimizer_step(step, &t, 1, stream);
#pragma once

#include <cstdint>

#include "braid/core/config.h"
#include "braid/core/dtype.h"
#include "braid/kernels/cpu.h"
#include "braid/kernels/optim.h"

#if !BRAID_HAVE_CUDA
#error \
    "braid/kernels/cuda.h: this build of braid has no CUDA (BRAID_HAVE_CUDA is 0); include it under #if BRAID_HAVE_CUDA"
#endif

namespace braid::kernels::cuda {

// ---- fused optimizer ------------------------------------------------------------------------

// The multi-tensor optimizer step of optim.h on the GPU: the same descriptor checks
// (check_optim_step), the same f32 scalars (optim_scalars) and the same formulas, one f32
// operation at a time with no FMA, so every finite result has the bits of
// kernels::cpu::optimizer_step (NaN results are NaN on both, with device-specific payloads).
// Stochastic rounding reads the same Philox words. All `count` tensors are updated by as few
// kernel launches as possible (up to 40 tensors per launch, any sizes).
void optimizer_step(const OptimStep& step, const OptimTensor* tensors, int64_t count, void* stream);

// The device form of cpu::unscale_and_check_finite: x = x * inv_scale in place (skipped when
// inv_scale == 1) for `count` tensors of `dtype` (f32, bf16, f16; data[t] holds counts[t]
// elements, device memory), and returns whether any element was NaN or +-Inf before scaling.
// Blocking: the answer is a host bool, so the call ends with one 4-byte device-to-host copy of
// the found-inf flag and waits for `stream` (everything enqueued on it before, too). A caller
// that must not wait keeps the flag on the device instead (not offered yet).
bool unscale_and_check_finite(DType dtype, void* const* data, const int64_t* counts, int64_t count,
                              float inv_scale, void* stream);

// ---- GEMM through cuBLASLt -------------------------------------------------------------------

// C = alpha * (scale_a * A) x (scale_b * B) + beta * C, row-major like cpu::GemmArgs, with A and
// B in fp8 (f8e4m3 or f8e5m2, not both e5m2) and per-tensor scales read from device memory
// (one float each; null means 1), accumulated in f32 and rounded once to c_dtype (bf16 or f32).
//
// Layout: cuBLASLt runs fp8 only with both operands contiguous along k (trans_a = kNo,
// trans_b = kYes: A is m x k, B is n x k, the layout of x * W^T for a weight W[out, in]). Other
// layouts are served by first transposing the operand into a temporary buffer on `stream`.
// Requirements (kNotSupported otherwise): compute capability 8.9 or newer (Ada, Hopper,
// Blackwell); k, lda and ldb multiples of 16 and A, B 16-byte aligned; where cuBLASLt still
// finds no algorithm (some m, n, ldc), the error says so.
struct GemmFp8Args {
  cpu::Trans trans_a = cpu::Trans::kNo;
  cpu::Trans trans_b = cpu::Trans::kYes;
  int64_t m = 0, n = 0, k = 0;     // C is m x n; op(A) is m x k; op(B) is k x n
  double alpha = 1.0, beta = 0.0;  // rounded to f32
  const void* a = nullptr;         // row-major, leading dimension lda (elements = bytes)
  int64_t lda = 0;
  DType a_dtype = DType::kF8E4M3;
  const float* scale_a = nullptr;  // device pointer to one float, or null (1)
  const void* b = nullptr;
  int64_t ldb = 0;
  DType b_dtype = DType::kF8E4M3;
  const float* scale_b = nullptr;
  void* c = nullptr;
  int64_t ldc = 0;
  DType c_dtype = DType::kBF16;  // bf16 or f32
};
void gemm_fp8(const GemmFp8Args& args, void* stream);

// Whether f32 GEMMs may use TF32 tensor cores (10-bit mantissa products, f32 accumulation):
// off by default, as torch.backends.cuda.matmul.allow_tf32.
enum class F32Math : uint8_t { kIeee, kTf32 };

// cpu::gemm's contract on the GPU (every field of cpu::GemmArgs, batches and broadcast
// strides included) for ab_dtype f32 (c f32), f16 / bf16 (c the same dtype or f32) and f64
// (c f64); other pairs throw kNotSupported. Results depend on cuBLASLt's algorithm (its
// summation order), so they are not the CPU's bits.
void gemm(const cpu::GemmArgs& args, void* stream, F32Math f32_math = F32Math::kIeee);

}  // namespace braid::kernels::cuda
