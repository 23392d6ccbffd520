// SPDX-License-Identifier: Apache-2.0
// Fused optimizer and mixed-precision kernels: one pass reads param (or its f32 master),
// grad and state and writes param, master and state (docs/mixed-precision.md). The
// descriptors are shared by every device: cpu:: implements them here, cuda:: (built when
// BRAID_HAVE_CUDA) in braid/kernels/cuda.h, with the same formulas.
//
// Formulas (torch 1.13's single-tensor optimizers; every step is one f32 operation rounded
// to nearest even, never fused into an FMA, so each SIMD level and the GPU give the bits of
// the scalar reference). Scalars are computed in double on the host and rounded to f32
// once: a = float(1 - beta1), lr_f = float(lr), ...
//   g = float(grad) * grad_scale;  if maximize: g = -g          (p: master if given, else param)
//   SGD:   if wd: g = g + wd * p
//          if momentum: buf = first_step ? g : buf * momentum + (1 - dampening) * g
//                       g = nesterov ? g + momentum * buf : buf
//          p = p + (-lr) * g
//   Adam:  if wd: g = g + wd * p                                (L2, torch.optim.Adam)
//   AdamW: p = p * (1 - lr * wd)                                (decoupled, torch.optim.AdamW)
//   both:  m = m * beta1 + (1 - beta1) * g
//          v = v * beta2 + ((1 - beta2) * g) * g
//          if amsgrad: vmax = max(vmax, v); v_used = vmax else v_used = v
//          denom = sqrt(v_used) / bc2_sqrt + eps    bc2_sqrt = sqrt(1 - beta2^step), or 1
//          p = p + (-step_size) * (m / denom)        step_size = lr / (1 - beta1^step), or lr
//   Lion:  c = m * beta1 + (1 - beta1) * g;  p = p * (1 - lr * wd)
//          p = p + (-lr) * sign(c)  (sign(0) = 0, sign(NaN) = NaN);  m = m * beta2 + (1 - beta2) *
//          g
// Then param = round(p) when a master is given or param is 16-bit (nearest even, or
// stochastic for bf16).
#pragma once

#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

enum class OptimAlgo : uint8_t { kSgd, kAdam, kAdamW, kLion };

// How an f32 result is written to a bf16 parameter. kStochastic: add the low 16 bits of a
// Philox word to the f32 bit pattern, then truncate to bf16 (non-finite values round to
// nearest); element i of a tensor uses word (rng_offset + i) of the stream `seed`
// (braid/core/rng.h, "braid's stream"), so the result is the same on every SIMD level and
// every device. f32 parameters ignore it; f16 parameters throw kNotSupported with it.
enum class Rounding : uint8_t { kNearest, kStochastic };

// One parameter's buffers: n contiguous elements each. Buffers of one tensor must not
// overlap each other; different tensors must not overlap either.
struct OptimTensor {
  int64_t n = 0;
  void* param = nullptr;       // param_dtype; written
  float* master = nullptr;     // f32 master weights (read and written), or null: p is param
  const void* grad = nullptr;  // grad_dtype; read only
  float* state0 =
      nullptr;  // SGD momentum_buffer (null when momentum == 0); Adam/AdamW/Lion exp_avg
  float* state1 = nullptr;  // Adam/AdamW exp_avg_sq
  float* state2 = nullptr;  // Adam/AdamW max_exp_avg_sq when amsgrad
  uint64_t rng_offset = 0;  // Rounding::kStochastic: Philox word of element 0
};

// The step applied to every tensor of one call (one parameter group at one step).
struct OptimStep {
  OptimAlgo algo = OptimAlgo::kAdamW;
  DType param_dtype = DType::kF32;  // f32, bf16, f16
  DType grad_dtype = DType::kF32;   // f32, bf16, f16
  double lr = 1e-3;
  double weight_decay = 0.0;
  double grad_scale = 1.0;  // gradients are multiplied by float(grad_scale) as they are read
  bool maximize = false;
  // SGD
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffers are (re)initialised to g, as torch's None buffer
  // Adam / AdamW / Lion (Lion uses beta1 and beta2 only)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool amsgrad = false;
  int64_t step = 1;             // this step's 1-based count, for the bias corrections
  bool bias_correction = true;  // false: step_size = lr, bc2_sqrt = 1
  Rounding rounding = Rounding::kNearest;
  uint64_t seed = 0;  // Rounding::kStochastic
};

// Host-side scalars of one step, rounded to f32 once (shared by every device's kernel so
// the coefficients are the same bits everywhere).
struct OptimScalars {
  float lr, neg_lr, weight_decay, decay;  // decay = 1 - lr * wd (AdamW, Lion)
  float grad_scale;
  float momentum, one_minus_dampening;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float neg_step_size, bc2_sqrt;
};
OptimScalars optim_scalars(const OptimStep& step);

// Checks a descriptor and its tensors: dtypes, required state buffers present, counts >= 0,
// hyper-parameters in range (lr >= 0, 0 <= beta < 1, eps >= 0, momentum >= 0, nesterov only
// with momentum > 0 and dampening == 0, step >= 1). Throws kInvalidArgument naming the
// field, the value and the expectation. Every device's optimizer_step calls it first.
void check_optim_step(const OptimStep& step, const OptimTensor* tensors, int64_t count);

namespace cpu {

// Applies `step` to `count` tensors in one call (the multi-tensor form). Tensors are
// independent; large ones are processed in blocks so that param, grad and state stream
// through the cache once.
void optimizer_step(const OptimStep& step, const OptimTensor* tensors, int64_t count);

// The same step split over `threads` threads (the calling thread is one of them): every tensor
// is cut into contiguous pieces of a multiple of 64 elements, one per thread, so the result
// is bit-identical to optimizer_step (the formulas are elementwise; stochastic rounding keeps
// each element's Philox word). Calls with fewer than 2^18 elements in all, or threads <= 1,
// run on the calling thread. Every thread uses the caller's SIMD level.
void optimizer_step_threaded(const OptimStep& step, const OptimTensor* tensors, int64_t count,
                             int threads);

// torch._amp_foreach_non_finite_check_and_unscale_: for each of `count` tensors (dtype f32,
// bf16 or f16, counts[t] contiguous elements at data[t]), x = x * inv_scale in place (in
// f32, rounded once; skipped when inv_scale == 1) and returns true when any element was
// NaN or +-Inf before scaling. One pass over memory.
bool unscale_and_check_finite(DType dtype, void* const* data, const int64_t* counts, int64_t count,
                              float inv_scale);

}  // namespace cpu
}  // namespace braid::kernels
