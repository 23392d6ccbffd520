// Linear under fp8 training (amp::Fp8Scope): the three GEMMs on fp8 operands with per-layer
// delayed scaling, against a reference built from amp's quantize / dequantize and plain f64
// loops; the layers fp8 leaves alone (sizes not multiples of 16, eval mode); the scales after
// a step; override_linear_precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "braid/amp/fp8.h"
#include "braid/core/rng.h"
#include "braid/nn/layers.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

// x [rows, in] times w [out, in]^T (+ b), in f64 over f32 values.
std::vector<double> matmul_t(const Tensor& x, const Tensor& w, int64_t rows, int64_t in,
                             int64_t out) {
  const Tensor xf = x.to(DType::kF32).contiguous(), wf = w.to(DType::kF32).contiguous();
  std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) {
        acc += double(xf.data<float>()[r * in + i]) * double(wf.data<float>()[o * in + i]);
      }
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  }
  return y;
}

// quantize with `scale` into `dtype`, back to f32: the operand an fp8 GEMM multiplies.
Tensor q(const Tensor& t, DType dtype, float scale) {
  return amp::dequantize_fp8(amp::quantize_fp8(t, dtype, scale), DType::kF32);
}

float abs_max(const Tensor& t) {
  float m = 0;
  for (double v : t.to_vector()) m = std::max(m, static_cast<float>(std::abs(v)));
  return m;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  const Tensor g = got.to(DType::kF32).contiguous();
  ASSERT_EQ(g.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    EXPECT_NEAR(g.data<float>()[i], w, tol * (1 + std::abs(w))) << "element " << i;
  }
}

TEST(LinearFp8, ForwardAndBothGradientsUseTheQuantizedOperands) {
  constexpr int64_t rows = 5, in = 32, out = 16;
  Generator gen(11);
  Linear lin(in, out, Bias::kNo, WeightLayout::kOutIn, DType::kF32, &gen);
  const Tensor x = scale(Tensor::randn({rows, in}, DType::kF32, &gen), 3.0);
  const Tensor dy = scale(Tensor::randn({rows, out}, DType::kF32, &gen), 0.01);
  amp::Fp8Training fp8;  // HYBRID: e4m3 forward, e5m2 gradients; scales start at 1
  Tensor y, dx;
  {
    amp::Fp8Scope scope(&fp8);
    y = lin.forward(x);
  }
  dx = lin.backward(dy);  // outside the scope: the layer kept its scalings
  ASSERT_EQ(fp8.num_layers(), 1u);
  const Tensor w = lin.weight().data();
  const Tensor xq = q(x, DType::kF8E4M3, 1.0f), wq = q(w, DType::kF8E4M3, 1.0f);
  const Tensor dyq = q(dy, DType::kF8E5M2, 1.0f);
  expect_close(y, matmul_t(xq, wq, rows, in, out), 1e-5);
  // dx = dyq wq: wq^T as [in, out] rows.
  expect_close(dx, matmul_t(dyq, wq.transpose(0, 1).contiguous(), rows, out, in), 1e-5);
  // dW = dyq^T xq.
  expect_close(
      lin.weight().grad(),
      matmul_t(dyq.transpose(0, 1).contiguous(), xq.transpose(0, 1).contiguous(), out, rows, in),
      1e-5);
  // The quantization is real: the result differs from the f32 GEMM.
  const std::vector<double> exact = matmul_t(x, w, rows, in, out);
  double diff = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    diff = std::max(diff, std::abs(double(y.data<float>()[i]) - exact[static_cast<size_t>(i)]));
  }
  EXPECT_GT(diff, 1e-4);

  // The step's amaxes set the next scales: fp8_max / amax.
  amp::Fp8Training::LinearScaling* sc = fp8.linear(&lin, in, out);
  const float amax_x = sc->input.step_amax();
  EXPECT_FLOAT_EQ(amax_x, abs_max(x));
  fp8.update();
  EXPECT_FLOAT_EQ(sc->input.scale(), 448.0f / amax_x);
  EXPECT_FLOAT_EQ(sc->grad_output.scale(), 57344.0f / abs_max(dy));
}

TEST(LinearFp8, LayersFp8CannotTakeAndEvalModeStayInTheComputeDtype) {
  Generator gen(3);
  Linear odd(10, 16, Bias::kYes, WeightLayout::kOutIn, DType::kF32, &gen);
  Linear even(16, 16, Bias::kYes, WeightLayout::kInOut, DType::kF32, &gen);
  const Tensor x10 = Tensor::randn({2, 10}, DType::kF32, &gen);
  const Tensor x16 = Tensor::randn({2, 16}, DType::kF32, &gen);
  const Tensor plain10 = odd.forward(x10);
  even.eval();
  const Tensor plain16 = even.forward(x16);
  amp::Fp8Training fp8;
  amp::Fp8Scope scope(&fp8);
  const Tensor y10 = odd.forward(x10);
  const Tensor y16 = even.forward(x16);  // eval: use_autocast_during_eval is false
  EXPECT_EQ(fp8.num_layers(), 0u);
  EXPECT_EQ(y10.to_vector(), plain10.to_vector());
  EXPECT_EQ(y16.to_vector(), plain16.to_vector());
  amp::Fp8Training in_eval({.in_eval = true});
  amp::Fp8Scope inner(&in_eval);
  (void)even.forward(x16);
  EXPECT_EQ(in_eval.num_layers(), 1u);
}

TEST(LinearFp8, OverrideLinearPrecisionKeepsTheChosenGemms) {
  constexpr int64_t rows = 3, in = 16, out = 32;
  Generator gen(5);
  Linear lin(in, out, Bias::kNo, WeightLayout::kOutIn, DType::kF32, &gen);
  const Tensor x = Tensor::randn({rows, in}, DType::kF32, &gen);
  const Tensor dy = Tensor::randn({rows, out}, DType::kF32, &gen);
  amp::Fp8Training fp8({.keep_fprop = true, .keep_dgrad = true});  // wgrad only in fp8
  Tensor y;
  {
    amp::Fp8Scope scope(&fp8);
    y = lin.forward(x);
  }
  const Tensor dx = lin.backward(dy);
  const Tensor w = lin.weight().data();
  expect_close(y, matmul_t(x, w, rows, in, out), 1e-6);  // full precision
  expect_close(dx, matmul_t(dy, w.transpose(0, 1).contiguous(), rows, out, in), 1e-6);
  const Tensor xq = q(x, DType::kF8E4M3, 1.0f), dyq = q(dy, DType::kF8E5M2, 1.0f);
  expect_close(
      lin.weight().grad(),
      matmul_t(dyq.transpose(0, 1).contiguous(), xq.transpose(0, 1).contiguous(), out, rows, in),
      1e-5);
}

}  // namespace
}  // namespace braid::nn
