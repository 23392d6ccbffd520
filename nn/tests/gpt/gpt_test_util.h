// Helpers for the GPT tests: tiny configurations, deterministic inputs, and a central
// finite-difference check of a scalar loss against a hand-written gradient (f64).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/rng.h"
#include "braid/nn/gpt.h"
#include "braid/tensor/ops.h"

namespace braid::nn::gpt_testing {

// vocab 11, n_positions 8, d 8, 2 heads, 2 layers, no dropout: small enough for finite
// differences over every parameter tensor.
inline GPTConfig tiny_config(DType dtype = DType::kF64) {
  GPTConfig cfg;
  cfg.vocab_size = 11;
  cfg.n_positions = 8;
  cfg.n_embd = 8;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0;
  cfg.initializer_range = 0.4;  // larger than GPT-2's 0.02 so every path carries signal
  cfg.dtype = dtype;
  return cfg;
}

inline Tensor random_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(static_cast<size_t>(batch * seq));
  for (double& x : v) x = static_cast<double>(gen.randint(0, vocab));
  return Tensor::from_vector(v, {batch, seq}, DType::kI64);
}

// Sum of (out * weights): its gradient with respect to out is `weights`.
inline double weighted_sum(const Tensor& out, const Tensor& weights) {
  return sum(mul(out.to(DType::kF64), weights.to(DType::kF64))).item();
}

// Up to `count` element indices of an n-element tensor, spread over it (first and last
// included).
inline std::vector<int64_t> sample_indices(int64_t n, int64_t count) {
  std::vector<int64_t> idx;
  if (n <= count) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (int64_t k = 0; k < count; ++k) idx.push_back(k * (n - 1) / (count - 1));
  return idx;
}

// Checks analytic[i] against (loss(x_i + eps) - loss(x_i - eps)) / (2 eps) for the sampled
// elements of `x` (an f64 tensor changed in place and restored).
inline void expect_matches_finite_differences(Tensor x, const Tensor& analytic,
                                              const std::function<double()>& loss,
                                              const std::string& what, int64_t count = 8,
                                              double eps = 1e-6, double tol = 1e-6) {
  ASSERT_EQ(x.dtype(), DType::kF64) << what;
  ASSERT_TRUE(analytic.defined()) << what << ": no gradient";
  ASSERT_EQ(analytic.shape(), x.shape()) << what;
  ASSERT_TRUE(x.is_contiguous()) << what;
  const std::vector<double> grad = analytic.to_vector();
  auto* p = x.data<double>();
  for (int64_t i : sample_indices(x.numel(), count)) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double up = loss();
    p[i] = keep - eps;
    const double down = loss();
    p[i] = keep;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(grad[static_cast<size_t>(i)], fd, tol * (1.0 + std::abs(fd)))
        << what << " element " << i;
  }
}

}  // namespace braid::nn::gpt_testing
