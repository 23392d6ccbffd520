#include "braid/nn/clip_grad.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

std::vector<Tensor> grads(uint64_t seed) {
  Generator gen(seed);
  return {Tensor::randn({33}, DType::kF32, &gen), Tensor::randn({4, 5}, DType::kF32, &gen),
          mul(Tensor::randn({7}, DType::kF32, &gen), Scalar(10.0))};
}

double reference_norm(const std::vector<Tensor>& gs, double p) {
  double acc = 0;
  for (const Tensor& g : gs) {
    for (double v : g.to_vector())
      acc = std::isinf(p) ? std::max(acc, std::fabs(v)) : acc + std::pow(std::fabs(v), p);
  }
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

TEST(ClipGrad, NormsOfEveryOrderMatchADoubleReference) {
  const auto gs = grads(1);
  for (double p : {1.0, 2.0, 3.0, kInfNorm}) {
    SCOPED_TRACE(p);
    const double want = reference_norm(gs, p);
    EXPECT_NEAR(grad_norm(gs, p), want, 1e-6 * want);
  }
  EXPECT_EQ(grad_norm({}, 2.0), 0.0);
  EXPECT_EQ(grad_norm({Tensor(), Tensor::zeros({0})}, 2.0), 0.0);
  EXPECT_THROW(grad_norm(gs, 0.0), Error);
}

TEST(ClipGrad, ClipsToMaxNormAndLeavesSmallGradients) {
  auto gs = grads(2);
  const double total = reference_norm(gs, 2.0);
  const auto before = gs[2].to_vector();
  const double returned = clip_grad_norm_(gs, 1.0);
  EXPECT_NEAR(returned, total, 1e-6 * total);
  EXPECT_NEAR(grad_norm(gs, 2.0), 1.0, 1e-5);
  const float coef = 1.0f / (static_cast<float>(returned) + 1e-6f);
  EXPECT_EQ(gs[2].to_vector()[0], static_cast<double>(static_cast<float>(before[0]) * coef));

  auto small = grads(3);
  const auto untouched = small[0].to_vector();
  clip_grad_norm_(small, 1e9);
  EXPECT_EQ(small[0].to_vector(), untouched);  // coefficient clamped to 1
}

TEST(ClipGrad, Bf16GradientsAndNonFiniteHandling) {
  std::vector<Tensor> gs = {Tensor::from_vector({3.0, 4.0}, {2}, DType::kBF16)};
  EXPECT_NEAR(clip_grad_norm_(gs, 1.0), 5.0, 1e-6);
  EXPECT_EQ(gs[0].dtype(), DType::kBF16);
  EXPECT_NEAR(gs[0].to_vector()[1], 0.8, 4e-3);

  std::vector<Tensor> bad = {Tensor::from_vector({1.0, NAN}, {2})};
  EXPECT_THROW(clip_grad_norm_(bad, 1.0, 2.0, NonFinite::kError), Error);
  EXPECT_EQ(bad[0].to_vector()[0], 1.0);  // untouched on error
  EXPECT_TRUE(std::isnan(clip_grad_norm_(bad, 1.0)));
  EXPECT_TRUE(std::isnan(bad[0].to_vector()[0]));  // torch: NaN coefficient spreads
  std::vector<Tensor> inf = {Tensor::from_vector({1.0, INFINITY}, {2})};
  try {
    clip_grad_norm_(inf, 1.0, kInfNorm, NonFinite::kError);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("inf"));
  }
}

TEST(ClipGrad, ValueClampsAndKeepsNaN) {
  std::vector<Tensor> gs = {Tensor::from_vector({-2.0, -0.1, 0.3, 5.0, NAN}, {5})};
  clip_grad_value_(gs, 0.25);
  const auto v = gs[0].to_vector();
  EXPECT_EQ(v[0], -0.25);
  EXPECT_EQ(v[1], static_cast<double>(-0.1f));
  EXPECT_EQ(v[2], 0.25);
  EXPECT_EQ(v[3], 0.25);
  EXPECT_TRUE(std::isnan(v[4]));
  EXPECT_THROW(clip_grad_value_(gs, -1.0), Error);
  // Non-contiguous gradient views are clipped in place.
  Tensor m = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  clip_grad_value_(std::vector<Tensor>{m.t()}, 2.5);
  EXPECT_EQ(m.to_vector(), (std::vector<double>{1, 2, 2.5, 2.5}));
}

TEST(ClipGrad, ParameterOverloadsUseTheirGradients) {
  std::vector<Parameter> ps = {Parameter(Tensor::zeros({2})), Parameter(Tensor::zeros({1}))};
  ps[0].grad() = Tensor::from_vector({3.0, 4.0}, {2});
  EXPECT_NEAR(clip_grad_norm_(ps, 10.0), 5.0, 1e-6);  // ps[1] has no gradient
  clip_grad_value_(ps, 1.0);
  EXPECT_EQ(ps[0].grad().to_vector(), (std::vector<double>{1.0, 1.0}));
}

}  // namespace
}  // namespace braid::nn
