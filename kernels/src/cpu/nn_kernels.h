// The per-level inner loops behind the layer kernels of cpu.h ("layers (nn)"): f32 rows only
// (f64 runs the scalar templates at every level; f16 / bf16 are widened to f32 in blocks by
// the baseline entry points). Implemented in nn_activation.cc / nn_loss.cc (scalar::) and
// nn_avx2.cc / nn_avx512.cc (avx2::, avx512::, from the templates of nn_simd.h).
#pragma once

#include <cstdint>

#include "braid/kernels/cpu.h"

namespace braid::kernels::cpu {

// dx[i] = dy[i] * f'(x[i]), f32.
using ActGradFn = void (*)(ActivationGrad op, int64_t n, const float* x, const float* dy,
                           float* dx);
// One logits row: max_out = max_c z_c (NaN if any is NaN), sum_exp = sum_c exp(z_c - max),
// sum_z = sum_c z_c.
using CeStatsFn = void (*)(const float* z, int64_t classes, float* max_out, float* sum_exp,
                           float* sum_z);
// out[c] = scale * exp(z[c] - lse) + offset (out may alias z).
using CeGradFn = void (*)(const float* z, int64_t classes, float lse, float scale, float offset,
                          float* out);

namespace scalar {
void act_grad_f32(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx);
void ce_stats_f32(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z);
void ce_grad_f32(const float* z, int64_t classes, float lse, float scale, float offset, float* out);
}  // namespace scalar
namespace avx2 {
void act_grad_f32(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx);
void ce_stats_f32(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z);
void ce_grad_f32(const float* z, int64_t classes, float lse, float scale, float offset, float* out);
}  // namespace avx2
namespace avx512 {
void act_grad_f32(ActivationGrad op, int64_t n, const float* x, const float* dy, float* dx);
void ce_stats_f32(const float* z, int64_t classes, float* max_out, float* sum_exp, float* sum_z);
void ce_grad_f32(const float* z, int64_t classes, float lse, float scale, float offset, float* out);
}  // namespace avx512

}  // namespace braid::kernels::cpu
