// axpby() and scale(): every SIMD level against a double reference with an error bound of a
// few f32 roundings plus one of the output format, aliasing, beta == 0, hand-derived values and
// bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "braid/core/float_types.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

template <class T>
std::vector<T> make(int64_t n, uint32_t seed) {
  const auto r = testing::random_f32(n, seed, -4.0f, 4.0f);
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(r[i]);
  return out;
}

class AxpbyIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  ScopedCpuIsa isa_{GetParam()};

  template <class T>
  void check() {
    const DType dt = dtype_of<T>();
    const double alpha = 1.25, beta = -0.75;
    // f32 (f64) rounds alpha*x, beta*y and the sum; the output format rounds once more.
    const auto tol = testing::dtype_tolerance(dt, 3);
    for (int64_t n : testing::tail_sizes()) {
      const auto x = make<T>(n, 1 + n), y = make<T>(n, 2 + n);
      std::vector<T> out(static_cast<size_t>(n)), sc(static_cast<size_t>(n));
      axpby(dt, n, alpha, x.data(), beta, y.data(), out.data());
      scale(dt, n, alpha, x.data(), sc.data());
      for (int64_t i = 0; i < n; ++i) {
        const double ax = alpha * as_double(x[i]), by = beta * as_double(y[i]);
        const double bound = tol.abs + tol.rel * (std::fabs(ax) + std::fabs(by));
        ASSERT_LE(std::fabs(as_double(out[i]) - (ax + by)), bound)
            << dt << " n " << n << " i " << i;
        ASSERT_LE(std::fabs(as_double(sc[i]) - ax), tol.abs + tol.rel * std::fabs(ax)) << dt;
      }
    }
  }
};

TEST_P(AxpbyIsaTest, F32) {
  check<float>();
}
TEST_P(AxpbyIsaTest, F64) {
  check<double>();
}
TEST_P(AxpbyIsaTest, F16) {
  check<half>();
}
TEST_P(AxpbyIsaTest, BF16) {
  check<bfloat16>();
}

// out aliasing x or y gives what a separate output gives.
TEST_P(AxpbyIsaTest, Aliasing) {
  const int64_t n = 1001;
  const auto x = make<float>(n, 7), y = make<float>(n, 8);
  std::vector<float> want(n);
  axpby(DType::kF32, n, 0.5, x.data(), 2.0, y.data(), want.data());
  auto x2 = x, y2 = y;
  axpby(DType::kF32, n, 0.5, x2.data(), 2.0, y.data(), x2.data());
  axpby(DType::kF32, n, 0.5, x.data(), 2.0, y2.data(), y2.data());
  EXPECT_EQ(x2, want);
  EXPECT_EQ(y2, want);
  std::vector<float> s = x, s_want(n);
  scale(DType::kF32, n, -3.0, x.data(), s_want.data());
  scale(DType::kF32, n, -3.0, s.data(), s.data());
  EXPECT_EQ(s, s_want);
}

INSTANTIATE_TEST_SUITE_P(Levels, AxpbyIsaTest, ::testing::ValuesIn(testing::supported_isas()),
                         testing::isa_test_name);

TEST(Axpby, HandDerivedValues) {
  const float x[3] = {3.0f, -1.0f, 0.5f}, y[3] = {4.0f, 8.0f, NAN};
  float out[3];
  axpby(DType::kF32, 2, 2.0, x, 0.5, y, out);
  EXPECT_EQ(out[0], 8.0f);                     // 2*3 + 0.5*4
  EXPECT_EQ(out[1], 2.0f);                     // 2*-1 + 0.5*8
  axpby(DType::kF32, 3, 2.0, x, 0.0, y, out);  // beta == 0: y is not read, NaN ignored
  EXPECT_EQ(out[2], 1.0f);
  axpby(DType::kF32, 3, 2.0, x, 0.0, nullptr, out);
  EXPECT_EQ(out[0], 6.0f);
  const bfloat16 bx[1] = {bfloat16(1.0f)}, by[1] = {bfloat16(1.0f)};
  bfloat16 bo[1];
  axpby(DType::kBF16, 1, 1.0, bx, 0x1p-8, by, bo);  // 1 + 2^-8 ties to even: 1
  EXPECT_EQ(bo[0].bits, 0x3f80);
  const double dx[1] = {0.1};
  double d_out[1];
  scale(DType::kF64, 1, 10.0, dx, d_out);
  EXPECT_EQ(d_out[0], 0.1 * 10.0);
}

TEST(Axpby, BadInput) {
  int32_t i = 0;
  expect_error([&] { axpby(DType::kI32, 1, 1.0, &i, 1.0, &i, &i); }, ErrorKind::kNotSupported,
               {"axpby", "i32"});
  expect_error([&] { scale(DType::kU8, 1, 1.0, &i, &i); }, ErrorKind::kNotSupported,
               {"scale", "u8"});
  float f = 0;
  expect_error([&] { axpby(DType::kF32, -2, 1.0, &f, 1.0, &f, &f); }, ErrorKind::kInvalidArgument,
               {"axpby", "-2"});
  expect_error([&] { axpby(DType::kF32, 1, 1.0, &f, 1.0, nullptr, &f); },
               ErrorKind::kInvalidArgument, {"axpby", "y"});
  expect_error([&] { scale(DType::kF32, 1, 1.0, nullptr, &f); }, ErrorKind::kInvalidArgument,
               {"scale", "x"});
}

}  // namespace
}  // namespace braid::kernels::cpu
