// SPDX-License-Identifier: Apache-2.0
// Parameter: a trainable tensor and its gradient, as one shared handle (copies refer to the
// same parameter, as torch's nn.Parameter objects do). Optimizers, clipping and sharding
// take lists of Parameters; a framework that is not braid's nn wraps its own buffers with
// Tensor::from_blob and hands them over the same way (docs/nn.md, "Parameters from other
// frameworks").
//
//   Parameter w(Tensor::randn({256, 256}));
//   w.grad() = Tensor::zeros(w.data().shape());   // or let a backward pass allocate it
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/tensor/tensor.h"

namespace braid::nn {

class Parameter {
 public:
  Parameter() = default;  // undefined: defined() is false
  explicit Parameter(Tensor data, bool requires_grad = true)
      : s_(std::make_shared<State>(State{std::move(data), Tensor(), requires_grad})) {}

  bool defined() const { return s_ != nullptr; }
  Tensor& data() const { return s_->data; }
  // Undefined until something writes a gradient (torch's p.grad is None).
  Tensor& grad() const { return s_->grad; }
  bool requires_grad() const { return s_->requires_grad; }
  void set_requires_grad(bool v) const { s_->requires_grad = v; }
  // Same handle (not same values).
  bool is(const Parameter& other) const { return s_ == other.s_; }
  const void* id() const { return s_.get(); }

 private:
  struct State {
    Tensor data;
    Tensor grad;
    bool requires_grad;
  };
  std::shared_ptr<State> s_;
};

// Parameters wrapped from tensors (a convenience for tests and for other frameworks).
std::vector<Parameter> make_parameters(const std::vector<Tensor>& tensors);

}  // namespace braid::nn
