// The fused optimizer's inner loops, as one table of function pointers per SIMD level.
// optim.cc walks each tensor in blocks: it widens 16-bit gradients and parameters to f32
// block buffers (through cast()), runs one math loop over all-f32 arrays, and rounds the
// parameter back (cast(), or the stochastic-rounding loop of this table). So a math loop
// depends only on the algorithm's choices (OptimVariant), never on the storage dtypes, and
// the table holds 17 of them per level instead of one per dtype combination.
//
// Shared by the baseline file (optim.cc) and the ISA files: declarations and compile-time
// constants only (Note [ISA files and the ODR] in elementwise_simd.h: ISA files call the
// constexpr helpers below only in constant expressions, so no ISA object emits them).
#pragma once

#include <cstdint>

#include "braid/kernels/optim.h"
#include "elementwise_kernels.h"

namespace braid::kernels::cpu {

enum class SgdMomentum : uint8_t { kNone, kPlain, kNesterov };

// The per-element branches of the formulas in optim.h, fixed at compile time in each math
// loop. Fields that do not apply to `algo` are false / kNone.
struct OptimVariant {
  OptimAlgo algo;
  bool weight_decay;     // SGD, Adam: g = g + wd * p (AdamW and Lion always apply `decay`)
  SgdMomentum momentum;  // SGD
  bool first_step;       // SGD with momentum: buf = g
  bool amsgrad;          // Adam, AdamW
  constexpr bool operator==(const OptimVariant&) const = default;
};

inline constexpr OptimVariant kOptimVariants[] = {
    {OptimAlgo::kSgd, false, SgdMomentum::kNone, false, false},
    {OptimAlgo::kSgd, true, SgdMomentum::kNone, false, false},
    {OptimAlgo::kSgd, false, SgdMomentum::kPlain, false, false},
    {OptimAlgo::kSgd, false, SgdMomentum::kPlain, true, false},
    {OptimAlgo::kSgd, true, SgdMomentum::kPlain, false, false},
    {OptimAlgo::kSgd, true, SgdMomentum::kPlain, true, false},
    {OptimAlgo::kSgd, false, SgdMomentum::kNesterov, false, false},
    {OptimAlgo::kSgd, false, SgdMomentum::kNesterov, true, false},
    {OptimAlgo::kSgd, true, SgdMomentum::kNesterov, false, false},
    {OptimAlgo::kSgd, true, SgdMomentum::kNesterov, true, false},
    {OptimAlgo::kAdam, false, SgdMomentum::kNone, false, false},
    {OptimAlgo::kAdam, false, SgdMomentum::kNone, false, true},
    {OptimAlgo::kAdam, true, SgdMomentum::kNone, false, false},
    {OptimAlgo::kAdam, true, SgdMomentum::kNone, false, true},
    {OptimAlgo::kAdamW, false, SgdMomentum::kNone, false, false},
    {OptimAlgo::kAdamW, false, SgdMomentum::kNone, false, true},
    {OptimAlgo::kLion, false, SgdMomentum::kNone, false, false},
};
inline constexpr int kNumOptimVariants = sizeof(kOptimVariants) / sizeof(kOptimVariants[0]);

// Which state buffers a variant reads and writes.
constexpr bool uses_state0(OptimVariant v) {
  return v.algo != OptimAlgo::kSgd || v.momentum != SgdMomentum::kNone;
}
constexpr bool uses_state1(OptimVariant v) {
  return v.algo == OptimAlgo::kAdam || v.algo == OptimAlgo::kAdamW;
}
constexpr bool uses_state2(OptimVariant v) {
  return uses_state1(v) && v.amsgrad;
}

// One block of one tensor: n elements of each array, all f32. p is read and written (the
// master, the f32 parameter, or a block buffer holding the widened 16-bit parameter); g is
// the gradient as stored (f32) or widened, not yet scaled. States the variant does not use
// may be null.
struct OptimBlock {
  int64_t n;
  float* p;
  const float* g;
  float* s0;
  float* s1;
  float* s2;
  // Prefetch distance in elements for the SIMD loops (Note [Step prefetch], optim.cc); 0: none.
  // The arrays continue past n (a block of a longer tensor) or the prefetch is a harmless no-op.
  int64_t prefetch = 0;
};

// grad_sign: 0x80000000 when step.maximize (g = -g as a sign flip, exact for NaN too), else 0.
using OptimMathFn = void (*)(const OptimScalars& s, uint32_t grad_sign, const OptimBlock& b);
// out[i] = bf16 of p[i], stochastically rounded with word (first_word + i) of the stream
// `seed` (optim.h, Rounding::kStochastic).
using RoundStochasticFn = void (*)(const float* p, uint16_t* out, int64_t n, uint64_t seed,
                                   uint64_t first_word);
// Whether any of n elements is NaN or +-Inf; the scaling form also sets x = x * inv_scale.
using UnscaleFn = bool (*)(void* data, int64_t n, float inv_scale);

struct OptimTable {
  OptimMathFn math[kNumOptimVariants] = {};  // indexed like kOptimVariants
  RoundStochasticFn round_bf16_stochastic = nullptr;
  // Rows kEwF32, kEwF16, kEwBF16 (elementwise_kernels.h; the f64 row stays null).
  UnscaleFn unscale[kNumFloatEwDtypes] = {};
  UnscaleFn check_finite[kNumFloatEwDtypes] = {};  // inv_scale == 1: reads only
};

// Each level fills every entry (the SIMD levels have code for all of them).
namespace scalar {
void fill_optim_table(OptimTable& t);
}
namespace avx2 {
void fill_optim_table(OptimTable& t);
}
namespace avx512 {
void fill_optim_table(OptimTable& t);
}

}  // namespace braid::kernels::cpu
