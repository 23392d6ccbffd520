// unary(): each SIMD level against the scalar reference (double <cmath>, rounded once) with
// a dtype-aware tolerance, over random values, random f32 bit patterns, every f16 / bf16 bit
// pattern and the special values; the scalar reference against values derived by hand; bad
// input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "braid/core/float_types.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

constexpr UnaryOp kOps[] = {UnaryOp::kExp,  UnaryOp::kLog,   UnaryOp::kTanh,     UnaryOp::kSigmoid,
                            UnaryOp::kRelu, UnaryOp::kGelu,  UnaryOp::kGeluTanh, UnaryOp::kSilu,
                            UnaryOp::kSqrt, UnaryOp::kRsqrt, UnaryOp::kNeg,      UnaryOp::kAbs};

// f32 error budget of each SIMD op, in ulps (docs/kernels.md, "Elementwise").
double op_ulps(UnaryOp op) {
  switch (op) {
    case UnaryOp::kExp:
    case UnaryOp::kLog:
      return 3;
    case UnaryOp::kTanh:
    case UnaryOp::kSigmoid:
    case UnaryOp::kSilu:
      return 4;
    case UnaryOp::kGeluTanh:
      return 5;
    case UnaryOp::kGelu:
      return 8;
    case UnaryOp::kRsqrt:
      return 1;
    default:
      return 0;  // relu, sqrt, neg, abs are exact
  }
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

template <class T>
std::vector<T> unary_inputs(int64_t n, uint32_t seed) {
  std::vector<T> out(static_cast<size_t>(n));
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    for (int64_t i = 0; i < n; ++i) out[i] = T::from_bits(static_cast<uint16_t>(i * 40503u + seed));
  } else {
    const auto bits = testing::random_f32_bits(n, seed);
    const auto small = testing::random_f32(n, seed + 1, -12.0f, 12.0f);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(i % 2 ? small[i] : bits[i]);
  }
  return out;
}

class UnarySimdTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  template <class T>
  void compare_with_scalar(int64_t n) {
    const DType dt = dtype_of<T>();
    const auto x = unary_inputs<T>(n, static_cast<uint32_t>(n) * 3 + 1);
    for (UnaryOp op : kOps) {
      std::vector<T> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      {
        ScopedCpuIsa scalar(CpuIsa::kScalar);
        unary(op, dt, n, x.data(), want.data());
      }
      {
        ScopedCpuIsa level(GetParam());
        unary(op, dt, n, x.data(), got.data());
      }
      auto tol = testing::dtype_tolerance(dt, op_ulps(op));
      // gelu_tanh's exponent 2u grows like x^3 and is computed in f32: for x < -2 the
      // relative error grows with |u|, while the absolute error stays below 3e-8.
      if (op == UnaryOp::kGeluTanh && dt != DType::kF64) tol.abs = std::max(tol.abs, 3e-8);
      int failures = 0;
      for (int64_t i = 0; i < n && failures < 5; ++i) {
        if (!testing::close_enough(as_double(want[i]), as_double(got[i]), tol)) {
          ++failures;
          ADD_FAILURE() << dt << " op " << int(op) << " x=" << as_double(x[i]) << " got "
                        << as_double(got[i]) << " want " << as_double(want[i]) << " (rel err "
                        << std::fabs(as_double(got[i]) / as_double(want[i]) - 1) << ")";
        }
      }
    }
  }
};

TEST_P(UnarySimdTest, F32AllTailSizes) {
  for (int64_t n : testing::tail_sizes()) compare_with_scalar<float>(n);
}
TEST_P(UnarySimdTest, F32ManyValues) {
  compare_with_scalar<float>(300000);
}
TEST_P(UnarySimdTest, F16EveryBitPattern) {
  compare_with_scalar<half>(65536);
}
TEST_P(UnarySimdTest, BF16EveryBitPattern) {
  compare_with_scalar<bfloat16>(65536);
}
TEST_P(UnarySimdTest, F64) {
  for (int64_t n : {int64_t{17}, int64_t{4099}}) compare_with_scalar<double>(n);
}

// The special inputs one by one, with their exact expected class.
TEST_P(UnarySimdTest, SpecialValues) {
  ScopedCpuIsa level(GetParam());
  auto f = [](UnaryOp op, float x) {
    float in[17], out[17];
    for (float& v : in) v = x;  // a full vector and a tail
    unary(op, DType::kF32, 17, in, out);
    EXPECT_EQ(std::memcmp(&out[0], &out[16], 4), 0) << "tail differs for op " << int(op);
    return out[0];
  };
  EXPECT_EQ(f(UnaryOp::kExp, -INFINITY), 0.0f);
  EXPECT_EQ(f(UnaryOp::kExp, INFINITY), INFINITY);
  EXPECT_EQ(f(UnaryOp::kExp, 89.0f), INFINITY);
  EXPECT_EQ(f(UnaryOp::kExp, 0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(f(UnaryOp::kExp, NAN)));
  EXPECT_EQ(f(UnaryOp::kLog, 0.0f), -INFINITY);
  EXPECT_EQ(f(UnaryOp::kLog, -0.0f), -INFINITY);
  EXPECT_EQ(f(UnaryOp::kLog, 1.0f), 0.0f);
  EXPECT_EQ(f(UnaryOp::kLog, INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(f(UnaryOp::kLog, -1.0f)));
  EXPECT_TRUE(std::isnan(f(UnaryOp::kLog, NAN)));
  EXPECT_NEAR(f(UnaryOp::kLog, 1e-45f), -103.2789f, 1e-3);  // subnormal input
  EXPECT_EQ(f(UnaryOp::kTanh, INFINITY), 1.0f);
  EXPECT_EQ(f(UnaryOp::kTanh, -INFINITY), -1.0f);
  EXPECT_TRUE(std::signbit(f(UnaryOp::kTanh, -0.0f)));
  EXPECT_EQ(f(UnaryOp::kSigmoid, -INFINITY), 0.0f);
  EXPECT_EQ(f(UnaryOp::kSigmoid, INFINITY), 1.0f);
  EXPECT_EQ(f(UnaryOp::kGelu, INFINITY), INFINITY);
  EXPECT_EQ(f(UnaryOp::kGelu, 30.0f), 30.0f);
  EXPECT_EQ(f(UnaryOp::kGelu, -30.0f), 0.0f);
  EXPECT_EQ(f(UnaryOp::kGeluTanh, INFINITY), INFINITY);
  EXPECT_EQ(f(UnaryOp::kRelu, -0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(f(UnaryOp::kRelu, NAN)));
  EXPECT_EQ(f(UnaryOp::kRsqrt, 0.0f), INFINITY);
  EXPECT_EQ(f(UnaryOp::kRsqrt, INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(f(UnaryOp::kRsqrt, -4.0f)));
  EXPECT_TRUE(std::isnan(f(UnaryOp::kSqrt, -4.0f)));
  EXPECT_EQ(f(UnaryOp::kAbs, -INFINITY), INFINITY);
  EXPECT_TRUE(std::signbit(f(UnaryOp::kNeg, 0.0f)));
}

// rsqrt is within 1 ulp of the correctly rounded result on every level.
TEST_P(UnarySimdTest, RsqrtWithinOneUlp) {
  ScopedCpuIsa level(GetParam());
  const auto x = testing::random_f32(100000, 3, 1e-30f, 1e30f);
  std::vector<float> out(x.size());
  unary(UnaryOp::kRsqrt, DType::kF32, static_cast<int64_t>(x.size()), x.data(), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float exact = static_cast<float>(1.0 / std::sqrt(static_cast<double>(x[i])));
    ASSERT_LE(std::fabs(out[i] - exact), std::fabs(std::nextafter(exact, 0.0f) - exact)) << x[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, UnarySimdTest, ::testing::ValuesIn(testing::simd_isas()),
                         testing::isa_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UnarySimdTest);

// ---- the scalar reference against values derived independently ----------------------------

TEST(Unary, ScalarReferenceHandDerived) {
  ScopedCpuIsa scalar(CpuIsa::kScalar);
  const double x[] = {1.0, -1.0, 0.5, 2.0, -2.0, 4.0, -5.0, -3.0};
  auto run = [&](UnaryOp op, int i) {
    double out = 0;
    unary(op, DType::kF64, 1, &x[i], &out);
    return out;
  };
  EXPECT_NEAR(run(UnaryOp::kExp, 0), 2.718281828459045, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kLog, 3), 0.6931471805599453, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kTanh, 2), 0.46211715726000974, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kSigmoid, 0), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kGelu, 0), 0.8413447460685429, 1e-15);    // Phi(1)
  EXPECT_NEAR(run(UnaryOp::kGelu, 1), -0.15865525393145707, 1e-15);  // -Phi(-1)
  EXPECT_NEAR(run(UnaryOp::kGelu, 6) / -1.4332578593959731e-06, 1.0, 1e-12);
  EXPECT_NEAR(run(UnaryOp::kGeluTanh, 0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kGeluTanh, 4), -0.04540230591222494, 1e-15);
  EXPECT_NEAR(run(UnaryOp::kSilu, 7), -0.14227761953270035, 1e-15);
  EXPECT_EQ(run(UnaryOp::kRsqrt, 5), 0.5);
  EXPECT_EQ(run(UnaryOp::kSqrt, 5), 2.0);
  EXPECT_EQ(run(UnaryOp::kRelu, 4), 0.0);
  EXPECT_EQ(run(UnaryOp::kNeg, 3), -2.0);
  EXPECT_EQ(run(UnaryOp::kAbs, 6), 5.0);
  // bf16 rounds the double result once: exp(1) = 2.71828... -> 2.71875 (0x402e).
  const bfloat16 one(1.0f);
  bfloat16 e;
  unary(UnaryOp::kExp, DType::kBF16, 1, &one, &e);
  EXPECT_EQ(e.bits, 0x402e);
}

TEST(Unary, InPlace) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa level(isa);
    std::vector<float> x = testing::random_f32(1000, 4, -3.0f, 3.0f);
    std::vector<float> copy = x, want(1000);
    unary(UnaryOp::kTanh, DType::kF32, 1000, copy.data(), want.data());
    unary(UnaryOp::kTanh, DType::kF32, 1000, x.data(), x.data());
    EXPECT_EQ(x, want) << cpu_isa_name(isa);
  }
}

TEST(Unary, BadInput) {
  int32_t i = 0;
  expect_error([&] { unary(UnaryOp::kExp, DType::kI32, 1, &i, &i); }, ErrorKind::kNotSupported,
               {"unary", "i32"});
  float f = 0;
  expect_error([&] { unary(UnaryOp::kExp, DType::kF32, -5, &f, &f); }, ErrorKind::kInvalidArgument,
               {"unary", "-5"});
  expect_error([&] { unary(UnaryOp::kExp, DType::kF32, 2, nullptr, &f); },
               ErrorKind::kInvalidArgument, {"unary", "x"});
}

}  // namespace
}  // namespace braid::kernels::cpu
