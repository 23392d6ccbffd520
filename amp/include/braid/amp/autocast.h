// SPDX-License-Identifier: Apache-2.0
// An autocast scope: tells layers which dtype to compute each kind of operation in, as
// torch.autocast does, with the seed's AutocastKwargs (enabled, cache_enabled). Layers ask
// `autocast_dtype(category, input_dtype)`; braid has no dispatcher that casts behind their
// back (docs/mixed-precision.md, "Autocast").
//
//   {
//     braid::amp::AutocastScope scope(DType::kBF16);
//     Tensor w = braid::amp::autocast_cast(weight, OpCategory::kMatmul);  // bf16, cached
//     ...
//   }  // the cast cache is dropped when the outermost scope ends
//
// The state is per thread; scopes nest (an inner scope with enabled = false turns autocast
// off inside it).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "braid/amp/precision.h"
#include "braid/core/dtype.h"
#include "braid/tensor/tensor.h"
#include "braid/tensor/tree.h"

namespace braid::amp {

// torch's autocast op lists, by category.
enum class OpCategory : uint8_t {
  kMatmul,      // linear, matmul, bmm, conv, attention scores: the low dtype
  kFp32,        // softmax, log_softmax, layer / rms norm, reductions, losses, exp / log: f32
  kPromote,     // elementwise with several inputs (add, mul, cat): the widest input dtype
  kPassThrough  // everything else: the input's dtype
};

// The seed's AutocastKwargs.
struct AutocastKwargs {
  bool enabled = true;
  std::optional<bool> cache_enabled;  // null: true, as torch's default
};

class Fp8Training;  // fp8.h

class AutocastScope {
 public:
  // dtype: f16 or bf16 (others throw kInvalidArgument).
  explicit AutocastScope(DType dtype, AutocastKwargs kwargs = {});
  // The same, with `fp8` the thread's fp8 training state for the scope (fp8.h's Fp8Scope):
  // mixed_precision fp8 is bf16 autocast with Linear's GEMMs in fp8.
  AutocastScope(DType dtype, AutocastKwargs kwargs, Fp8Training* fp8);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  AutocastScope(AutocastScope&& other) noexcept;
  AutocastScope& operator=(AutocastScope&&) = delete;
  // A scope that changes nothing (contextlib.nullcontext).
  static AutocastScope noop();

 private:
  struct NoopTag {};
  explicit AutocastScope(NoopTag) : active_(false) {}
  bool active_ = true;
  bool fp8_set_ = false;  // this scope set the thread's fp8 training state
  Fp8Training* prev_fp8_ = nullptr;
  bool prev_enabled_ = false;
  DType prev_dtype_ = DType::kF32;
  bool prev_cache_ = false;
};

bool autocast_enabled();
DType autocast_low_dtype();  // the innermost enabled scope's dtype (f32 when none)

// The dtype an op of `category` computes in for an input of `input_dtype`: the input dtype
// outside autocast and for non-float inputs; inside, kMatmul -> the scope's dtype (f32, f16,
// bf16 inputs), kFp32 -> f32 (16-bit inputs), kPassThrough -> input_dtype. For kPromote pass
// the promoted input dtype.
DType autocast_dtype(OpCategory category, DType input_dtype);

// x converted to autocast_dtype(category, x.dtype()) (x itself when equal). With the cache
// enabled, f32 tensors cast to the low dtype are cached per storage and view for the rest of
// the outermost scope, as torch caches casts of weights: call it for parameters, not for
// activations that change inside the scope. The cache holds its sources weakly (torch's
// cached_casts does too): it keeps the casts, not the f32 storages they came from.
Tensor autocast_cast(const Tensor& x, OpCategory category);

// The seed's get_mixed_precision_context_manager: an AutocastScope for the policy's low
// dtype when native_amp is set and the precision is fp16 or bf16 (fp8 autocasts to its bf16
// base); otherwise a scope that changes nothing (contextlib.nullcontext).
AutocastScope get_mixed_precision_context_manager(bool native_amp, PrecisionType precision,
                                                  AutocastKwargs kwargs = {});

// The seed's convert_outputs_to_fp32: wraps a forward function so every f16 / bf16 tensor of
// its output Tree is converted to f32 (convert_to_fp32 from tree.h).
std::function<Tree(const Tree&)> convert_outputs_to_fp32(std::function<Tree(const Tree&)> forward);

}  // namespace braid::amp
