// SPDX-License-Identifier: Apache-2.0
// Gradient clipping with torch.nn.utils' semantics (docs/mixed-precision.md, "Clipping").
//
//   double norm = braid::nn::clip_grad_norm_(opt_params, /*max_norm=*/1.0);
//
// The norm is the global one over every gradient given: each gradient's norm in f32 (its
// elements accumulated in f32 in braid's fixed order), then the norm of those norms, as
// torch computes torch.norm(torch.stack([torch.norm(g) for g in grads])). The sharded form
// (gradients split over ranks) is built on this by the sharding layer.
#pragma once

#include <limits>
#include <vector>

#include "braid/nn/parameter.h"
#include "braid/tensor/tensor.h"

namespace braid::nn {

enum class NonFinite : uint8_t {
  kPropagate,  // torch's error_if_nonfinite=False: a NaN / Inf norm scales the grads by NaN
  kError       // error_if_nonfinite=True: throw kInvalidArgument, gradients untouched
};

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The total norm of the gradients (norm_type 2, 1, any p > 0, or kInfNorm: max |g|).
// Undefined gradients are skipped; none at all gives 0.
double grad_norm(const std::vector<Tensor>& grads, double norm_type = 2.0);

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)) and returns total_norm
// (torch.nn.utils.clip_grad_norm_; the coefficient is computed and applied in f32).
double clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm, double norm_type = 2.0,
                       NonFinite non_finite = NonFinite::kPropagate);
double clip_grad_norm_(const std::vector<Parameter>& params, double max_norm,
                       double norm_type = 2.0, NonFinite non_finite = NonFinite::kPropagate);

// Clamps every gradient to [-clip_value, clip_value] (torch.nn.utils.clip_grad_value_).
void clip_grad_value_(const std::vector<Tensor>& grads, double clip_value);
void clip_grad_value_(const std::vector<Parameter>& params, double clip_value);

// The gradients of params that have one.
std::vector<Tensor> gradients_of(const std::vector<Parameter>& params);

}  // namespace braid::nn
