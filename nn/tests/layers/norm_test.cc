// LayerNorm and RMSNorm: backward against finite differences in f64 (random weight and bias
// so their gradients matter), forward against values computed here, f32 against f64, the
// bf16 / autocast dtype rules, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/amp/autocast.h"
#include "braid/core/error.h"
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

void randomize_parameters(Module& m, uint64_t seed) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    p.data().copy_(Tensor::randn(p.data().shape(), DType::kF64, &gen));
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  for (Bias bias : {Bias::kYes, Bias::kNo}) {
    LayerNorm ln(7, 1e-5, bias, DType::kF64);
    randomize_parameters(ln, 3);
    Generator gen(4);
    check_layer_gradients(ln, Tensor::randn({3, 7}, DType::kF64, &gen));
    check_layer_gradients(ln, Tensor::randn({2, 2, 7}, DType::kF64, &gen));
  }
}

TEST(LayerNorm, ForwardMatchesDefinition) {
  LayerNorm ln(4, 1e-5, Bias::kYes, DType::kF64);
  ln.weight().data().copy_(Tensor::from_vector({1, 2, 3, 4}, {4}, DType::kF64));
  ln.bias().data().copy_(Tensor::from_vector({0, 1, 0, -1}, {4}, DType::kF64));
  const std::vector<double> x = {1, 2, 4, 9};
  const Tensor y = ln.forward(Tensor::from_vector(x, {1, 4}, DType::kF64));
  ln.clear_saved();
  const double mean = 4, var = (9 + 4 + 0 + 25) / 4.0, rstd = 1 / std::sqrt(var + 1e-5);
  const double w[] = {1, 2, 3, 4}, b[] = {0, 1, 0, -1};
  const auto v = y.to_vector();
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(v[k], (x[k] - mean) * rstd * w[k] + b[k], 1e-12);
}

TEST(LayerNorm, F32CloseToF64AndAutocastDtypes) {
  Generator gen(8);
  LayerNorm l64(64, 1e-5, Bias::kYes, DType::kF64), l32(64);
  randomize_parameters(l64, 9);
  l32.weight().data().copy_(l64.weight().data());
  l32.bias().data().copy_(l64.bias().data());
  const Tensor x = Tensor::randn({5, 64}, DType::kF64, &gen);
  const Tensor dy = Tensor::randn({5, 64}, DType::kF64, &gen);
  const Tensor y64 = l64.forward(x), y32 = l32.forward(x.to(DType::kF32));
  EXPECT_LT(max_abs_diff(y32, y64), 2e-5);
  const Tensor dx64 = l64.backward(dy), dx32 = l32.backward(dy.to(DType::kF32));
  EXPECT_LT(max_abs_diff(dx32, dx64), 2e-5);
  EXPECT_LT(max_abs_diff(l32.weight().grad(), l64.weight().grad()), 1e-4);
  EXPECT_LT(max_abs_diff(l32.bias().grad(), l64.bias().grad()), 1e-4);

  // bf16 input: computed in f32; output f32 under autocast, bf16 outside.
  const Tensor xb = x.to(DType::kBF16);
  const Tensor y_plain = l32.forward(xb);
  EXPECT_EQ(y_plain.dtype(), DType::kBF16);
  EXPECT_EQ(l32.backward(dy.to(DType::kBF16)).dtype(), DType::kBF16);
  amp::AutocastScope scope(DType::kBF16);
  const Tensor y_auto = l32.forward(xb);
  EXPECT_EQ(y_auto.dtype(), DType::kF32);
  EXPECT_LT(max_abs_diff(y_auto, y64), 0.1);
  EXPECT_EQ(l32.backward(dy.to(DType::kF32)).dtype(), DType::kBF16);  // the input's dtype
}

TEST(RMSNorm, GradientsMatchFiniteDifferences) {
  RMSNorm rms(6, 1e-6, DType::kF64);
  randomize_parameters(rms, 5);
  Generator gen(6);
  check_layer_gradients(rms, Tensor::randn({4, 6}, DType::kF64, &gen));
}

TEST(RMSNorm, ForwardMatchesDefinitionAndF32) {
  RMSNorm r64(3, 1e-6, DType::kF64), r32(3, 1e-6);
  r64.weight().data().copy_(Tensor::from_vector({2, 1, 0.5}, {3}, DType::kF64));
  r32.weight().data().copy_(r64.weight().data());
  const Tensor x = Tensor::from_vector({3, -4, 12}, {1, 3}, DType::kF64);
  const Tensor y = r64.forward(x);
  const double rs = 1 / std::sqrt((9 + 16 + 144) / 3.0 + 1e-6);
  const auto v = y.to_vector();
  EXPECT_NEAR(v[0], 3 * rs * 2, 1e-12);
  EXPECT_NEAR(v[1], -4 * rs, 1e-12);
  EXPECT_NEAR(v[2], 12 * rs * 0.5, 1e-12);
  EXPECT_LT(max_abs_diff(r32.forward(x.to(DType::kF32)), y), 1e-6);
  r64.clear_saved();
  r32.clear_saved();
}

TEST(Norms, BadInputThrows) {
  LayerNorm ln(4);
  RMSNorm rms(4);
  for (Layer* l : {static_cast<Layer*>(&ln), static_cast<Layer*>(&rms)}) {
    try {
      l->forward(Tensor::zeros({2, 3}));
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(e.message().find(l->type_name()), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("expected dim 4"), std::string::npos) << e.message();
    }
    EXPECT_THROW(l->forward(Tensor::zeros({2, 4}, DType::kI32)), Error);
  }
  EXPECT_THROW(LayerNorm(0), Error);
}

}  // namespace
}  // namespace braid::nn
