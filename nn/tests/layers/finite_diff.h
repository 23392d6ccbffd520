// Central finite differences for checking hand-written backward passes in f64, shared by the
// layer tests and the GPT tests:
//
//   Linear lin(3, 4, Bias::kYes, WeightLayout::kOutIn, DType::kF64);
//   braid::nn::testing::check_layer_gradients(lin, Tensor::randn({2, 3}, DType::kF64));
//
// check_layer_gradients projects the output onto a fixed random tensor (loss = sum(y * r)),
// runs the layer's backward with r, and compares the input gradient and every parameter
// gradient with (loss(v + h) - loss(v - h)) / 2h, element by element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>

#include "braid/core/rng.h"
#include "braid/nn/module.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/tensor.h"

namespace braid::nn::testing {

// d loss / d x by central differences; x must be a contiguous f64 tensor. Each element is
// moved by +-h in place (through a tensor that shares x's storage, so parameters work) and
// restored.
inline Tensor numeric_grad(const std::function<double()>& loss, const Tensor& x, double h = 1e-6) {
  EXPECT_EQ(x.dtype(), DType::kF64) << "finite differences need f64";
  EXPECT_TRUE(x.is_contiguous());
  Tensor g = Tensor::zeros(x.shape(), DType::kF64);
  double* v = x.data<double>();
  double* out = g.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const double up = loss();
    v[i] = saved - h;
    const double down = loss();
    v[i] = saved;
    out[i] = (up - down) / (2 * h);
  }
  return g;
}

// Element by element: |a - n| <= atol + rtol * |n|. One failure per tensor, listing the
// first few mismatches.
inline void expect_grad_close(const Tensor& analytic, const Tensor& numeric,
                              const std::string& what, double atol = 1e-6, double rtol = 1e-5) {
  ASSERT_TRUE(analytic.defined()) << what << ": no analytic gradient";
  ASSERT_EQ(analytic.shape(), numeric.shape()) << what;
  const std::vector<double> a = analytic.to_vector(), n = numeric.to_vector();
  int bad = 0;
  std::ostringstream detail;
  detail.precision(17);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - n[i]) <= atol + rtol * std::abs(n[i])) continue;
    if (++bad <= 5) {
      detail << "\n  [" << i << "] analytic " << a[i] << " vs numeric " << n[i];
    }
  }
  if (bad > 0)
    ADD_FAILURE() << what << ": " << bad << " of " << a.size() << " elements differ"
                  << detail.str();
}

// sum(y * r) in f64.
inline double project(const Tensor& y, const Tensor& r) {
  return sum(mul(y.to(DType::kF64), r)).item();
}

struct GradCheckOptions {
  double h = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
  uint64_t seed = 1234;  // of the projection tensor
  // Runs before every forward (e.g. to reset a Dropout generator so each pass draws one mask).
  std::function<void()> before_forward;
};

// Checks layer.backward against finite differences of layer.forward: the input gradient when
// x is floating, and the gradient of every parameter (all must be f64).
inline void check_layer_gradients(Layer& layer, const Tensor& x, const GradCheckOptions& opt = {}) {
  layer.zero_grad();
  const Tensor input = x.contiguous();  // perturbed in place below
  if (opt.before_forward) opt.before_forward();
  const Tensor y = layer.forward(input);
  Generator gen(opt.seed);
  const Tensor r = Tensor::randn(y.shape(), DType::kF64, &gen);
  const Tensor dx = layer.backward(r.to(y.dtype()));
  EXPECT_EQ(layer.saved_count(), 0u) << layer.type_name() << ": backward left saved contexts";
  auto loss = [&] {
    NoGradGuard no_grad;
    if (opt.before_forward) opt.before_forward();
    return project(layer.forward(input), r);
  };
  if (x.dtype() == DType::kF64) {
    expect_grad_close(dx, numeric_grad(loss, input, opt.h), layer.type_name() + " input", opt.atol,
                      opt.rtol);
  }
  for (auto& [name, p] : layer.named_parameters()) {
    if (!p.requires_grad()) continue;
    expect_grad_close(p.grad(), numeric_grad(loss, p.data(), opt.h), layer.type_name() + " " + name,
                      opt.atol, opt.rtol);
  }
}

}  // namespace braid::nn::testing
