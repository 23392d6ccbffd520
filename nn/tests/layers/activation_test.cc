// Gelu (exact, tanh), Relu, Silu and Dropout: backward against finite differences in f64,
// forward against formulas, f32 / bf16 against f64; Dropout's mask rules.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/layers.h"
#include "braid/tensor/ops.h"
#include "finite_diff.h"

namespace braid::nn {
namespace {

using testing::check_layer_gradients;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector(), vb = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// Inputs away from relu's kink (finite differences across 0 are meaningless).
Tensor away_from_zero(Shape shape, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::randn(std::move(shape), DType::kF64, &gen);
  double* v = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::abs(v[i]) < 1e-3) v[i] = 0.5;
  }
  return x;
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  Gelu gelu_exact, gelu_tanh(GeluApproximate::kTanh);
  Relu relu;
  Silu silu;
  for (Layer* l : {static_cast<Layer*>(&gelu_exact), static_cast<Layer*>(&gelu_tanh),
                   static_cast<Layer*>(&relu), static_cast<Layer*>(&silu)}) {
    SCOPED_TRACE(l->type_name());
    check_layer_gradients(*l, scale(away_from_zero({3, 9}, 1), 3.0));
  }
}

TEST(Activations, ForwardMatchesFormulas) {
  const std::vector<double> xs = {-3, -1, -0.25, 0, 0.5, 2};
  const Tensor x = Tensor::from_vector(xs, {6}, DType::kF64);
  Gelu ge, gt(GeluApproximate::kTanh);
  Silu si;
  Relu re;
  const auto a = ge.forward(x).to_vector(), b = gt.forward(x).to_vector();
  const auto c = si.forward(x).to_vector(), d = re.forward(x).to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_NEAR(a[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(b[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))),
                1e-12);
    EXPECT_NEAR(c[i], v / (1 + std::exp(-v)), 1e-12);
    EXPECT_EQ(d[i], v > 0 ? v : 0.0);
  }
}

TEST(Activations, LowPrecisionCloseToF64) {
  const Tensor x = scale(away_from_zero({1000}, 2), 2.5);
  Generator gen(3);
  const Tensor dy = Tensor::randn({1000}, DType::kF64, &gen);
  Gelu ge, gt(GeluApproximate::kTanh);
  Silu si;
  Relu re;
  for (Layer* l : {static_cast<Layer*>(&ge), static_cast<Layer*>(&gt), static_cast<Layer*>(&si),
                   static_cast<Layer*>(&re)}) {
    SCOPED_TRACE(l->type_name());
    const Tensor y64 = l->forward(x);
    const Tensor dx64 = l->backward(dy);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const Tensor y = l->forward(x.to(dt));
      const Tensor dx = l->backward(dy.to(dt));
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(dx.dtype(), dt);
      const double tol = dt == DType::kF32 ? 1e-5 : 0.1;
      EXPECT_LT(max_abs_diff(y, y64), tol);
      EXPECT_LT(max_abs_diff(dx, dx64), tol);
    }
  }
}

TEST(Activations, RejectIntegerInput) {
  Gelu g;
  EXPECT_THROW(g.forward(Tensor::zeros({2}, DType::kI64)), Error);
}

// ---- Dropout -----------------------------------------------------------------------------

TEST(Dropout, IdentityInEvalAndForZeroP) {
  Generator gen(1);
  const Tensor x = Tensor::randn({4, 5}, DType::kF32, &gen);
  Dropout eval_drop(0.5, &gen);
  eval_drop.eval();
  const auto offset = gen.offset();
  EXPECT_TRUE(equal(eval_drop.forward(x), x));
  EXPECT_TRUE(equal(eval_drop.backward(x), x));
  Dropout zero(0.0, &gen);
  EXPECT_TRUE(equal(zero.forward(x), x));
  EXPECT_TRUE(equal(zero.backward(x), x));
  EXPECT_EQ(gen.offset(), offset);  // drew nothing
}

TEST(Dropout, MaskFollowsTheDocumentedRuleAndIsReproducible) {
  const double p = 0.3;
  Generator gen(42);
  const auto state = gen.get_state();
  const Tensor x = Tensor::ones({3, 37}, DType::kF64);
  Dropout drop(p, &gen);
  const Tensor y1 = drop.forward(x);
  drop.clear_saved();
  // The rule: element i is kept when uniform word i of the draw is >= p.
  Generator ref(42);
  std::vector<float> u(x.numel());
  ref.fill_uniform(u.data(), x.numel());
  const auto v = y1.to_vector();
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(v[i], u[i] >= p ? 1.0 / (1.0 - p) : 0.0) << i;
  }
  gen.set_state(state);
  EXPECT_TRUE(equal(drop.forward(x), y1));
  drop.clear_saved();
  EXPECT_FALSE(equal(drop.forward(x), y1));  // the next draw differs
  drop.clear_saved();
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  Generator gen(5);
  const Tensor x = Tensor::randn({200}, DType::kF32, &gen);
  Dropout drop(0.5, &gen);
  const Tensor y = drop.forward(x);
  const Tensor dx = drop.backward(x);  // same values: dx must equal y
  EXPECT_TRUE(equal(dx, y));
  int zeros = 0;
  for (double v : y.to_vector()) zeros += v == 0;
  EXPECT_GT(zeros, 60);
  EXPECT_LT(zeros, 140);
}

TEST(Dropout, GradientsMatchFiniteDifferencesWithAFixedMask) {
  Generator gen(8);
  const auto state = gen.get_state();
  Dropout drop(0.4, &gen);
  testing::GradCheckOptions opt;
  opt.before_forward = [&] { gen.set_state(state); };
  check_layer_gradients(drop, Tensor::randn({3, 11}, DType::kF64), opt);
}

TEST(Dropout, PreservesTheExpectation) {
  Generator gen(11);
  const int64_t n = 200000;
  Dropout drop(0.25, &gen);
  const double m = mean(drop.forward(Tensor::ones({n}, DType::kF32)), DType::kF64).item();
  drop.clear_saved();
  EXPECT_NEAR(m, 1.0, 0.01);  // std of the mean ~ sqrt(p / (1 - p) / n) = 0.0013
}

TEST(Dropout, PEqualOneDropsEverythingAndBadPThrows) {
  Dropout all(1.0);
  const Tensor y = all.forward(Tensor::ones({10}));
  all.clear_saved();
  for (double v : y.to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(Dropout(1.5), Error);
  EXPECT_THROW(Dropout(-0.1), Error);
}

}  // namespace
}  // namespace braid::nn
