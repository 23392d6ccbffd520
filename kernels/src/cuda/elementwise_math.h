// The per-element arithmetic of the cuda table's elementwise kernels (binary, unary,
// activation_backward), written once for the GPU and the host so that
// braid_kernels_cuda_host_test compares this very code with kernels::cpu at CpuIsa::kScalar.
//
// Note [Elementwise numerics on cuda].
//   - binary, axpby, scale, masked_scale: one IEEE operation per step, as the cpu's scalar
//     loops; every finite result has the cpu's bits (NaN payloads aside: GPU arithmetic
//     returns the canonical NaN). braid_kernels is compiled with -fmad=false (kernels/
//     CMakeLists.txt), so nvcc never fuses a product and a sum into an FMA.
//   - unary and activation_backward compute in double with the formulas of the cpu's scalar
//     reference and round once, exactly as it does. The GPU's double exp / log / tanh / erfc
//     are within 1-2 ulp of double (CUDA C Programming Guide, "Mathematical Functions"),
//     glibc's within 1, so a rounded f32 / f16 / bf16 result differs from the cpu's at most
//     by one ulp of its format, and only when the double result lies that close to a rounding
//     boundary; f64 results may differ by a few ulps of f64.
//   - integer division by zero gives 0 on the GPU (the cpu throws): raising would need a host
//     synchronisation, and torch's CUDA kernels do not raise either.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "braid/kernels/types.h"
#include "cast_math.h"
#include "hd.h"

namespace braid::kernels::cuda::math {

// ---- binary ------------------------------------------------------------------------------------

// a op b in the compute type C (f32 for f16 / bf16). max / min: a NaN a wins, then a NaN b;
// equal operands (-0, +0) give b. Integers wrap; division truncates, min / -1 wraps to min,
// and a zero divisor gives 0.
template <BinaryOp kOp, typename C>
BRAID_HD inline C binary_apply(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (kOp == BinaryOp::kAdd) return a + b;
    if constexpr (kOp == BinaryOp::kSub) return a - b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
    if constexpr (kOp == BinaryOp::kDiv) return a / b;
    if constexpr (kOp == BinaryOp::kMax) return a != a ? a : (a > b ? a : b);
    if constexpr (kOp == BinaryOp::kMin) return a != a ? a : (a < b ? a : b);
  } else {
    using U = std::make_unsigned_t<C>;  // two's-complement wrap, no UB
    if constexpr (kOp == BinaryOp::kAdd) return static_cast<C>(U(a) + U(b));
    if constexpr (kOp == BinaryOp::kSub) return static_cast<C>(U(a) - U(b));
    if constexpr (kOp == BinaryOp::kMul) return static_cast<C>(U(a) * U(b));
    if constexpr (kOp == BinaryOp::kDiv) {
      if (b == 0) return C(0);
      if (b == -1) return static_cast<C>(U(0) - U(a));
      return a / b;
    }
    if constexpr (kOp == BinaryOp::kMax) return a > b ? a : b;
    if constexpr (kOp == BinaryOp::kMin) return a < b ? a : b;
  }
}

// One element of binary() in dtype D: integers directly, floats in their compute type.
template <BinaryOp kOp, DType D>
BRAID_HD inline Bits<D> binary_element(Bits<D> a, Bits<D> b) {
  if constexpr (Elem<D>::kind == Kind::kInt) {
    return binary_apply<kOp>(a, b);
  } else {
    Bits<D> r;
    store<D>(&r, 0, binary_apply<kOp>(load<D>(&a, 0), load<D>(&b, 0)));
    return r;
  }
}

// ---- unary: the cpu scalar reference's double formulas (kernels/src/cpu/unary.cc)
// ----------------

template <UnaryOp kOp>
BRAID_HD inline double unary_apply(double x) {
  constexpr double kSqrt1_2 = 0.70710678118654752440;
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  if constexpr (kOp == UnaryOp::kExp) return exp(x);
  if constexpr (kOp == UnaryOp::kLog) return log(x);
  if constexpr (kOp == UnaryOp::kTanh) return tanh(x);
  if constexpr (kOp == UnaryOp::kSigmoid) return 1.0 / (1.0 + exp(-x));
  if constexpr (kOp == UnaryOp::kRelu) return x < 0 ? 0.0 : x;  // NaN and -0 pass through
  if constexpr (kOp == UnaryOp::kGelu) return 0.5 * x * erfc(-x * kSqrt1_2);
  if constexpr (kOp == UnaryOp::kGeluTanh) {
    const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
  }
  if constexpr (kOp == UnaryOp::kSilu) return x / (1.0 + exp(-x));
  if constexpr (kOp == UnaryOp::kSqrt) return sqrt(x);
  if constexpr (kOp == UnaryOp::kRsqrt) return 1.0 / sqrt(x);
  if constexpr (kOp == UnaryOp::kNeg) return -x;
  if constexpr (kOp == UnaryOp::kAbs) return fabs(x);
}

// One element of unary(): widened exactly, computed in double, rounded once.
template <UnaryOp kOp, DType D>
BRAID_HD inline Bits<D> unary_element(Bits<D> x) {
  return from_double<D>(unary_apply<kOp>(static_cast<double>(load<D>(&x, 0))));
}

// ---- activation_backward: the cpu scalar reference (kernels/src/cpu/nn_activation.cc)
// ------------

BRAID_HD inline double act_derivative(ActivationGrad op, double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  constexpr double kKappa = 0.044715;
  constexpr double kClamp = 1e4;  // the derivatives are 0 or 1 beyond; keeps Inf * 0 out
  if (x > kClamp) x = kClamp;
  if (x < -kClamp) x = -kClamp;
  switch (op) {
    case ActivationGrad::kRelu:
      return x > 0 ? 1.0 : 0.0;
    case ActivationGrad::kGelu:
      return 0.5 * erfc(-x * kInvSqrt2) + x * kInvSqrt2Pi * exp(-0.5 * x * x);
    case ActivationGrad::kGeluTanh: {
      const double t = tanh(kSqrt2OverPi * (x + kKappa * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * kKappa * x * x);
    }
    case ActivationGrad::kSilu: {
      const double s = 1.0 / (1.0 + exp(-x));
      return s * (1 + x * (1 - s));
    }
  }
  return 0;
}

// relu passes dy through where x > 0 (threshold_backward: dy = Inf stays Inf, not NaN).
BRAID_HD inline double act_grad(ActivationGrad op, double x, double dy) {
  if (op == ActivationGrad::kRelu) return x > 0 ? dy : 0.0;
  return dy * act_derivative(op, x);
}

// One element as the cpu's scalar level computes it: f64 in double; f32 through double rounded
// to f32; f16 / bf16 widened to f32, then as f32, then rounded to nearest even once more.
template <DType D>
BRAID_HD inline Bits<D> act_grad_element(ActivationGrad op, Bits<D> x, Bits<D> dy) {
  if constexpr (D == DType::kF64) {
    return act_grad(op, x, dy);
  } else {
    const float xf = load<D>(&x, 0), dyf = load<D>(&dy, 0);
    const float r = static_cast<float>(act_grad(op, xf, dyf));
    Bits<D> out;
    store<D>(&out, 0, r);
    return out;
  }
}

}  // namespace braid::kernels::cuda::math
