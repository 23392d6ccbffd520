// SPDX-License-Identifier: Apache-2.0
// Precision policies (design.md, "Precision policy"; docs/mixed-precision.md): which dtype a
// model's parameters are stored in, computed in, reduced in, which dtype buffers use, and
// which dtype the optimizer's master copy and state keep. The names follow the seed's
// PrecisionType ("no", "fp16", "bf16", "fp8") and FSDP's MixedPrecision fields.
//
//   auto policy = braid::amp::PrecisionPolicy::from("bf16");
//   policy.keep_in_fp32_modules = {"lm_head", "ln_f"};
//   DType d = policy.param_dtype_for("transformer.h.0.attn.c_attn");  // bf16
//   DType e = policy.param_dtype_for("lm_head");                      // f32
//   auto scope = policy.autocast();                         // autocast.h: bf16 autocast
//
// One policy is resolved per job (the Accelerator: mixed_precision, then the FSDP plugin's
// explicit mixed_precision_policy, then keep_in_fp32_modules) and carried whole: sharding
// (ShardingOptions::precision), autocast, the GradScaler (GradScaler::for_policy), the
// optimizer's master and state dtypes and big-model loading read it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "braid/core/dtype.h"

namespace braid::amp {

class AutocastScope;    // autocast.h
struct AutocastKwargs;  // autocast.h
class Fp8Training;      // fp8.h

// The seed's accelerate.utils.PrecisionType.
enum class PrecisionType : uint8_t { kNo, kFp16, kBf16, kFp8 };

// "no" (also "fp32"), "fp16", "bf16", "fp8"; anything else throws kInvalidArgument listing
// the accepted names.
PrecisionType parse_precision_type(std::string_view name);
std::string_view precision_type_name(PrecisionType type);  // "no", "fp16", "bf16", "fp8"

// transformers' _keep_in_fp32_modules rule, the one matcher braid uses (the precision policy,
// big-model loading): true when a whole run of `name`'s dotted components equals an entry
// ("ln_f" keeps "transformer.ln_f.weight", not "transformer.xln_f.weight" nor "ln_foo.bias";
// "h.0" keeps "transformer.h.0.mlp.c_fc.weight").
bool keep_in_fp32(std::string_view name, const std::vector<std::string>& modules);

struct PrecisionPolicy {
  PrecisionType type = PrecisionType::kNo;
  DType param_dtype = DType::kF32;    // parameters as the model computes with them
  DType compute_dtype = DType::kF32;  // matmuls under autocast (fp8: the base dtype, bf16)
  DType reduce_dtype = DType::kF32;   // gradients on the wire (accumulated in f32 by comm/)
  DType buffer_dtype = DType::kF32;   // non-trainable buffers
  DType master_dtype = DType::kF32;   // the optimizer's master copy of every parameter
  DType state_dtype = DType::kF32;    // optimizer state (momentum, exp_avg, ...)
  // Modules whose parameters stay f32 when param_dtype is narrower (transformers'
  // _keep_in_fp32_modules), matched by keep_in_fp32 above.
  std::vector<std::string> keep_in_fp32_modules{};

  // The policy Accelerate's FSDP plugin builds for a mixed_precision string:
  //   no:   everything f32
  //   fp16: param, compute, reduce, buffer f16; master and state f32; needs a GradScaler
  //   bf16: param, compute, reduce, buffer bf16; master and state f32
  //   fp8:  bf16 as the base (param, reduce, buffer), matmuls in fp8 through amp/fp8.h
  static PrecisionPolicy from(PrecisionType type);
  static PrecisionPolicy from(std::string_view name) { return from(parse_precision_type(name)); }

  // param_dtype, or f32 for a parameter of a keep_in_fp32 module when param_dtype is
  // narrower than f32 (an f64 param_dtype is never narrowed; transformers keeps modules in
  // f32 only under 16-bit dtypes).
  DType param_dtype_for(std::string_view parameter_name) const;
  // Whether keep_in_fp32_modules keeps this parameter out of param_dtype.
  bool keeps_in_fp32(std::string_view parameter_name) const;
  // True when the stored parameter dtype differs from master_dtype, so the optimizer keeps
  // a master copy.
  bool needs_master_weights(DType stored_param_dtype) const {
    return stored_param_dtype != master_dtype;
  }
  // Only fp16 needs loss scaling: bf16 has f32's exponent range (docs/mixed-precision.md).
  bool needs_grad_scaler() const { return type == PrecisionType::kFp16; }

  // The autocast scope of this policy (defined in autocast.cc; include autocast.h): compute_dtype
  // when it is f16 or bf16, with `fp8` as the scope's fp8 training state for type fp8 (bf16
  // autocast with Linear's GEMMs in fp8); a scope that changes nothing when compute_dtype is
  // f32 ("no", or a policy whose parameters are just stored narrower).
  AutocastScope autocast() const;
  AutocastScope autocast(const AutocastKwargs& kwargs, Fp8Training* fp8 = nullptr) const;

  bool operator==(const PrecisionPolicy&) const = default;
};

}  // namespace braid::amp
