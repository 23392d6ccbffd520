// SPDX-License-Identifier: Apache-2.0
// Losses with hand-written backward (docs/nn.md). A loss takes two inputs, so it is a Module
// with its own forward / backward rather than a Layer. Computed in f32 (f64 for f64 logits)
// whatever the logits' dtype, as autocast does; the loss is a 0-d f32 (or f64) tensor, or the
// per-element losses for Reduction::kNone.
//
//   CrossEntropyLoss ce({.ignore_index = -100, .label_smoothing = 0.1});
//   Tensor loss = ce.forward(logits, targets);   // logits [N, C] or [B, T, C]; targets [N] / [B,
//   T] Tensor dlogits = ce.backward();              // d loss / d logits, in the logits' dtype
#pragma once

#include <cstdint>

#include "braid/nn/module.h"

namespace braid::nn {

enum class Reduction : uint8_t { kMean, kSum, kNone };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  double label_smoothing = 0.0;  // in [0, 1]
};

// torch.nn.functional.cross_entropy over the last dimension of the logits, with class-index
// targets (i64 or i32). kMean divides by the number of targets that are not ignore_index (NaN
// when all are ignored, as torch); ignored positions get zero loss and zero gradient. A
// target outside [0, C) that is not ignore_index throws kOutOfRange naming it.
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {})
      : Module("CrossEntropyLoss"), opt_(options) {}
  Tensor forward(const Tensor& logits, const Tensor& targets);
  // grad_loss: the gradient of the loss (a 0-d tensor, or the shape of the per-element
  // losses for kNone); undefined means 1.
  Tensor backward(const Tensor& grad_loss = {});

 private:
  CrossEntropyOptions opt_;
};

// Mean (or sum, or none) of (input - target)^2; input and target of one shape and dtype.
class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::kMean)
      : Module("MSELoss"), reduction_(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor backward(const Tensor& grad_loss = {});  // gradient w.r.t. input

 private:
  Reduction reduction_;
};

}  // namespace braid::nn
