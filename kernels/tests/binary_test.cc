// binary(): every SIMD level and operand pattern against an independent reference computed
// in double (bit for bit: one f32 operation is what double-then-round gives), broadcasting
// and coalescing through strides, integer semantics, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "braid/core/float_types.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

template <class T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
T from_d(double v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(v));  // f32 result, then one rounding to the narrow format
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

// The documented semantics, written independently of the kernels.
template <class T>
T reference(BinaryOp op, T ta, T tb) {
  if constexpr (std::is_integral_v<T>) {
    const int64_t a = ta, b = tb;
    switch (op) {
      case BinaryOp::kAdd:
        return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case BinaryOp::kSub:
        return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
      case BinaryOp::kMul:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case BinaryOp::kDiv:
        return static_cast<T>(a / b);  // tests avoid 0 and min / -1 here
      case BinaryOp::kMax:
        return static_cast<T>(std::max(a, b));
      case BinaryOp::kMin:
        return static_cast<T>(std::min(a, b));
    }
  } else {
    const double a = to_d(ta), b = to_d(tb);
    const bool f64 = std::is_same_v<T, double>;
    auto rounded = [&](double r) { return from_d<T>(f64 ? r : static_cast<float>(r)); };
    switch (op) {
      // for f64 inputs the double operation is the reference itself
      case BinaryOp::kAdd:
        return rounded(a + b);
      case BinaryOp::kSub:
        return rounded(a - b);
      case BinaryOp::kMul:
        return rounded(a * b);
      case BinaryOp::kDiv:
        return rounded(a / b);
      case BinaryOp::kMax:
        if (std::isnan(a)) return ta;
        if (std::isnan(b)) return tb;
        return a > b ? ta : tb;  // equal (0 vs -0) gives b
      case BinaryOp::kMin:
        if (std::isnan(a)) return ta;
        if (std::isnan(b)) return tb;
        return a < b ? ta : tb;
    }
  }
  return T{};
}

template <class T>
bool same(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return a == b;
  } else {
    const double x = to_d(a), y = to_d(b);
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
    return std::memcmp(&a, &b, sizeof(T)) == 0;  // bitwise: -0 and 0 differ
  }
}

template <class T>
std::vector<T> inputs(int64_t n, uint32_t seed, bool nonzero) {
  const std::vector<float> r = testing::random_f32(n, seed, -100.0f, 100.0f);
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 3.0};
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>) {
      T v = static_cast<T>(r[i]);
      if (i % 7 == 3) v = static_cast<T>(std::numeric_limits<T>::max() - (i % 3));  // overflow
      if (nonzero && v == 0) v = 7;
      out[i] = v;
    } else {
      out[i] = from_d<T>(i % 5 == 2 ? specials[(i / 5) % 8] : r[i]);
    }
  }
  return out;
}

constexpr BinaryOp kOps[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                             BinaryOp::kDiv, BinaryOp::kMax, BinaryOp::kMin};

class BinaryIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  ScopedCpuIsa isa_{GetParam()};

  // The three fast patterns and a strided one, 1-d, every tail size.
  template <class T>
  void check_patterns() {
    const DType dt = dtype_of<T>();
    for (int64_t n : testing::tail_sizes()) {
      const auto a = inputs<T>(n + 1, 1 + n, false);
      const auto b = inputs<T>(2 * n + 1, 2 + n, std::is_integral_v<T>);
      const std::pair<int64_t, int64_t> strides[] = {{1, 1}, {1, 0}, {0, 1}, {1, 2}, {0, 0}};
      for (BinaryOp op : kOps) {
        for (auto [sa, sb] : strides) {
          std::vector<T> out(static_cast<size_t>(n));
          binary(op, dt, 1, &n, a.data(), &sa, b.data(), &sb, out.data());
          for (int64_t i = 0; i < n; ++i) {
            const T want = reference(op, a[i * sa], b[i * sb]);
            ASSERT_TRUE(same(out[i], want))
                << dt << " op " << int(op) << " strides " << sa << "," << sb << " n " << n << " i "
                << i << ": " << to_d(a[i * sa]) << ", " << to_d(b[i * sb]) << " gave "
                << to_d(out[i]) << " want " << to_d(want);
          }
        }
      }
    }
  }
};

TEST_P(BinaryIsaTest, F32) {
  check_patterns<float>();
}
TEST_P(BinaryIsaTest, F16) {
  check_patterns<half>();
}
TEST_P(BinaryIsaTest, BF16) {
  check_patterns<bfloat16>();
}
TEST_P(BinaryIsaTest, F64) {
  check_patterns<double>();
}
TEST_P(BinaryIsaTest, I64) {
  check_patterns<int64_t>();
}
TEST_P(BinaryIsaTest, I32) {
  check_patterns<int32_t>();
}

// [3, 4, 5] = a [3, 1, 5] op b [4, 1] broadcast (numpy rules), plus a transposed a.
TEST_P(BinaryIsaTest, BroadcastShapes) {
  const int64_t shape[3] = {3, 4, 5};
  const auto a = inputs<float>(15, 5, false);
  const auto b = inputs<float>(4, 6, false);
  const int64_t sa[3] = {5, 0, 1}, sb[3] = {0, 1, 0}, sat[3] = {1, 0, 3};
  for (BinaryOp op : kOps) {
    std::vector<float> out(60), out_t(60);
    binary(op, DType::kF32, 3, shape, a.data(), sa, b.data(), sb, out.data());
    binary(op, DType::kF32, 3, shape, a.data(), sat, b.data(), sb, out_t.data());
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) {
          const int o = (i * 4 + j) * 5 + k;
          EXPECT_TRUE(same(out[o], reference(op, a[i * 5 + k], b[j]))) << o;
          EXPECT_TRUE(same(out_t[o], reference(op, a[i + 3 * k], b[j]))) << o;
        }
  }
}

// Dense [4, 6, 8] and a [1, 1, 8] row: coalescing gives one long row and one broadcast row.
TEST_P(BinaryIsaTest, CoalescedDimensions) {
  const int64_t shape[3] = {4, 6, 8};
  const auto a = inputs<bfloat16>(192, 9, false);
  const auto b = inputs<bfloat16>(8, 10, false);
  const int64_t sa[3] = {48, 8, 1}, sb[3] = {0, 0, 1};
  std::vector<bfloat16> out(192);
  binary(BinaryOp::kMul, DType::kBF16, 3, shape, a.data(), sa, b.data(), sb, out.data());
  for (int i = 0; i < 192; ++i) {
    ASSERT_TRUE(same(out[i], reference(BinaryOp::kMul, a[i], b[i % 8]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, BinaryIsaTest, ::testing::ValuesIn(testing::supported_isas()),
                         testing::isa_test_name);

// ---- hand-derived values -----------------------------------------------------------------

template <class T>
T run1(BinaryOp op, DType dt, T a, T b) {
  T out{};
  binary(op, dt, 0, nullptr, &a, nullptr, &b, nullptr, &out);  // ndim 0: one element
  return out;
}

TEST(Binary, HandDerivedValues) {
  EXPECT_EQ(run1(BinaryOp::kAdd, DType::kF32, 1.5f, 2.25f), 3.75f);
  EXPECT_EQ(run1(BinaryOp::kDiv, DType::kF64, 1.0, 4.0), 0.25);
  EXPECT_TRUE(std::isnan(run1(BinaryOp::kMax, DType::kF32, NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(run1(BinaryOp::kMax, DType::kF32, 1.0f, NAN)));
  EXPECT_TRUE(std::isnan(run1(BinaryOp::kMin, DType::kF32, -INFINITY, NAN)));
  EXPECT_EQ(run1(BinaryOp::kMin, DType::kF32, -INFINITY, 0.0f), -INFINITY);
  // bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds to even (1).
  EXPECT_EQ(run1(BinaryOp::kAdd, DType::kBF16, bfloat16(1.0f), bfloat16(0x1p-8f)).bits, 0x3f80);
  EXPECT_EQ(run1(BinaryOp::kAdd, DType::kBF16, bfloat16(1.0f), bfloat16(0x1p-7f)).bits, 0x3f81);
  // f16: 65504 + 32 = 65536 >= 65520 overflows to Inf.
  EXPECT_EQ(run1(BinaryOp::kAdd, DType::kF16, half(65504.0f), half(32.0f)).bits, 0x7c00);
  EXPECT_EQ(run1(BinaryOp::kDiv, DType::kI32, 7, -2), -3);  // truncates toward zero
  EXPECT_EQ(run1(BinaryOp::kDiv, DType::kI32, -7, 2), -3);
  const int32_t imin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(run1(BinaryOp::kDiv, DType::kI32, imin, -1), imin);  // wraps
  EXPECT_EQ(run1(BinaryOp::kAdd, DType::kI32, std::numeric_limits<int32_t>::max(), 1), imin);
  EXPECT_EQ(run1<int64_t>(BinaryOp::kMul, DType::kI64, int64_t{1} << 40, int64_t{1} << 30),
            int64_t{0});  // 2^70 wraps to 0
  EXPECT_EQ(run1<int64_t>(BinaryOp::kMax, DType::kI64, -5, 3), 3);
}

TEST(Binary, EmptyShapeWritesNothing) {
  const int64_t shape[2] = {3, 0};
  const int64_t strides[2] = {0, 1};
  binary(BinaryOp::kAdd, DType::kF32, 2, shape, nullptr, strides, nullptr, strides, nullptr);
}

TEST(Binary, BadInput) {
  int8_t a = 1, b = 2, out = 0;
  expect_error(
      [&] { binary(BinaryOp::kAdd, DType::kI8, 0, nullptr, &a, nullptr, &b, nullptr, &out); },
      ErrorKind::kNotSupported, {"binary", "i8"});
  int32_t x[3] = {1, 2, 3}, y[3] = {1, 0, 1}, o[3];
  const int64_t n = 3, s = 1;
  expect_error([&] { binary(BinaryOp::kDiv, DType::kI32, 1, &n, x, &s, y, &s, o); },
               ErrorKind::kInvalidArgument, {"binary", "division by zero", "i32"});
  const int64_t bad = -2;
  expect_error([&] { binary(BinaryOp::kAdd, DType::kI32, 1, &bad, x, &s, y, &s, o); },
               ErrorKind::kInvalidArgument, {"shape[0]", "-2"});
  expect_error([&] { binary(BinaryOp::kAdd, DType::kI32, -1, &n, x, &s, y, &s, o); },
               ErrorKind::kInvalidArgument, {"ndim", "-1"});
  expect_error([&] { binary(BinaryOp::kAdd, DType::kF32, 1, &n, nullptr, &s, y, &s, o); },
               ErrorKind::kInvalidArgument, {"null", "a"});
}

}  // namespace
}  // namespace braid::kernels::cpu
