// SPDX-License-Identifier: Apache-2.0
// The vocabulary of kernel calls shared by every device (cpu, cuda, hip, meta): operation enums
// and argument structs. What each operation computes is documented once, in cpu.h (the
// reference device); table.h gathers every device's implementation behind one table.
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

// How cast() rounds into fp8 (cpu.h, cast).
enum class CastMode : uint8_t { kDefault, kSaturate };

// Elementwise binary ops (cpu.h, binary).
enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kMax, kMin };

// Elementwise unary ops (cpu.h, unary).
enum class UnaryOp : uint8_t {
  kExp,
  kLog,
  kTanh,
  kSigmoid,
  kRelu,
  kGelu /* exact, erf */,
  kGeluTanh,
  kSilu,
  kSqrt,
  kRsqrt,
  kNeg,
  kAbs
};

// Reductions over the middle axis of [outer, len, inner] (cpu.h, reduce).
enum class ReduceOp : uint8_t { kSum, kMean, kMax, kMin, kNormL2 };

// Row-major GEMM (cpu.h, gemm).
enum class Trans : uint8_t { kNo, kYes };

struct GemmArgs {
  Trans trans_a = Trans::kNo;
  Trans trans_b = Trans::kNo;
  int64_t m = 0, n = 0, k = 0;  // C is m x n; op(A) is m x k; op(B) is k x n
  double alpha = 1.0, beta = 0.0;
  const void* a = nullptr;  // row-major, leading dimension lda (elements)
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  DType ab_dtype = DType::kF32;  // f32, f64, f16, bf16
  DType c_dtype = DType::kF32;   // ab_dtype; for f16 / bf16 inputs also f32 or f64
  int64_t batch = 1;             // C[i] = alpha op(A[i]) op(B[i]) + beta C[i]
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between batch items
};

// Activation derivatives (cpu.h, activation_backward).
enum class ActivationGrad : uint8_t { kRelu, kGelu, kGeluTanh, kSilu };

// Causal self-attention (cpu.h, causal_attention_forward / _backward).
struct AttentionArgs {
  int64_t batch = 0, seq = 0, n_head = 0, head_dim = 0;
  DType dtype = DType::kF32;  // qkv, out and their gradients: f64, f32, f16, bf16
  double dropout_p = 0.0;     // in [0, 1); 0 applies no dropout
  uint64_t dropout_seed = 0, dropout_offset = 0;  // offset a multiple of 4
};

// bitsandbytes' two 4-bit data types (bnb_4bit_quant_type "nf4" / "fp4"; docs/quantization.md).
enum class Quant4Type : uint8_t { kNf4, kFp4 };

}  // namespace braid::kernels
