// SPDX-License-Identifier: Apache-2.0
// Tensor-level quantization in bitsandbytes' formats (docs/quantization.md): 4-bit NF4 / FP4
// with block-wise absmax and optional double quantization of the absmax, and LLM.int8's
// row-wise int8 with outlier columns. The kernels are the kernel table's quant ops
// (kernels_for(tensor.device()): cpu_quant.h on cpu, quant.cu on cuda, checks only on meta).
//
//   QuantizedTensor4bit q = quantize_4bit(w, Quant4Type::kNf4, 64, /*double_quant=*/true);
//   Tensor w16 = dequantize_4bit(q, DType::kBF16);            // w's shape, bf16
//   QuantizedInt8 q8 = quantize_int8(w);                         // w: [out, in]
//   Tensor y = int8_linear(x, q8, 6.0);                           // x [..., in] -> [..., out]
//   Tensor z = linear_4bit(x, q, DType::kF32);   // x · dequant(w)ᵀ, w never materialized
#pragma once

#include <cstdint>
#include <string_view>

#include "braid/kernels/cpu_quant.h"
#include "braid/tensor/tensor.h"

namespace braid {

using kernels::cpu::Quant4Type;

// "nf4" / "fp4" (bnb_4bit_quant_type); parse throws kInvalidArgument naming the value.
std::string_view quant4_type_name(Quant4Type type);
Quant4Type parse_quant4_type(std::string_view name);

// bitsandbytes' QuantState of a 4-bit tensor (the quant-state keys of its safetensors files).
struct Quant4State {
  Quant4Type type = Quant4Type::kNf4;
  int64_t blocksize = 64;
  Shape shape;                // the original tensor's shape
  DType dtype = DType::kF32;  // the original tensor's dtype
  Tensor absmax;              // f32 [blocks]; u8 [blocks] when nested (double quantization)
  Tensor code;                // f32 [16]: quant_map
  bool nested = false;        // bnb_4bit_use_double_quant
  float offset = 0.0f;        // nested_offset: the mean that was subtracted before quantizing
  Tensor nested_absmax;       // f32 [ceil(blocks / nested_blocksize)]
  Tensor nested_code;         // f32 [256]: nested_quant_map (the signed dynamic code)
  int64_t nested_blocksize = 256;
};

struct QuantizedTensor4bit {
  Tensor packed;  // u8 [(numel + 1) / 2, 1]: two codes per byte, first in the high nibble
  Quant4State state;
  // Bytes held: packed data plus every state tensor.
  int64_t nbytes() const;
};

// Quantizes a floating CPU tensor (any shape; flattened in C order). double_quant quantizes
// the absmax as bitsandbytes' compress_statistics does: offset = mean(absmax) (accumulated in
// f64, rounded to f32), then 8-bit blocks of 256 over absmax - offset.
QuantizedTensor4bit quantize_4bit(const Tensor& x, Quant4Type type, int64_t blocksize = 64,
                                  bool double_quant = false);
// The per-block absmax in f32 (dequantized when nested).
Tensor absmax_f32(const Quant4State& state);
// The values in `dtype` (floating), shape state.shape.
Tensor dequantize_4bit(const QuantizedTensor4bit& q, DType dtype);

// LLM.int8 weight: cb i8 [out, in] (bitsandbytes' CB, saved as "weight"), scb f32 [out] (SCB).
struct QuantizedInt8 {
  Tensor cb;
  Tensor scb;
  int64_t nbytes() const;
};
// Row-wise absmax int8 of a 2-d floating CPU tensor.
QuantizedInt8 quantize_int8(const Tensor& w);
// cb * scb / 127 in `dtype`.
Tensor dequantize_int8(const QuantizedInt8& q, DType dtype);
// y = x W^T through int8 with LLM.int8's outlier decomposition (columns of x with an element
// >= threshold run in f32; threshold 0 turns it off). x: floating [..., in]; y: f32 [..., out].
Tensor int8_linear(const Tensor& x, const QuantizedInt8& w, double threshold);

// y = x · Wᵀ for a 4-bit weight W [out, in] through the fused dequant-GEMM (the table's
// gemm_4bit, bitsandbytes' gemv_4bit): W is dequantized tile by tile inside the kernel, never as
// a whole. x: floating [..., in], rounded to `compute` (f32, bf16 or f16) first; y: [..., out] in
// `compute`, summed in f32 in the order of Note [gemm_4bit order] (kernels/src/cpu/quant.cc).
// Extra memory during the call: x and y in compute, the absmax in f32 (4 bytes per block) and one
// tile per thread (cpu_quant.h's gemm_4bit_tile_rows(in) * in * 4 bytes).
Tensor linear_4bit(const Tensor& x, const QuantizedTensor4bit& q, DType compute);
// dx = dy · W for the same weight (the table's gemm_4bit_nn), W never materialized: the input
// gradient of a 4-bit Linear. dy: floating [..., out], rounded to `compute`; dx: [..., in] in
// `compute`, each element summed over W's rows in order (cpu_quant.h's gemm_4bit_nn).
Tensor linear_4bit_input_grad(const Tensor& dy, const QuantizedTensor4bit& q, DType compute);

}  // namespace braid
