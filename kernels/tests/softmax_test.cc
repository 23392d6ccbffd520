// softmax() / log-softmax: every SIMD level against kScalar and against a double computation
// (tolerance), rows summing to 1, hand-derived values, -Inf entries, all -Inf and NaN rows,
// large magnitudes, in-place use, reduced dtypes and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::close_enough;
using testing::expect_error;
using testing::Tolerance;

// Double-precision softmax of one row, written from the definition.
std::vector<double> softmax_f64(const std::vector<double>& x, bool log) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : x) out.push_back(log ? (v - m) - std::log(s) : std::exp(v - m) / s);
  return out;
}

std::vector<float> run_f32(const std::vector<float>& x, int64_t rows, int64_t len, bool log,
                           CpuIsa isa) {
  ScopedCpuIsa scope(isa);
  std::vector<float> out(x.size());
  softmax(DType::kF32, rows, len, x.data(), out.data(), log);
  return out;
}

// exp's error (Note [Vector exp]) gives a few ulps, and an f32 sum of len terms a relative
// error of up to len * 2^-24 (the scalar reference adds sequentially); for log-softmax that
// error is absolute, beside eps * |log(sum)|.
Tolerance f32_tol(bool log, int64_t len) {
  const double sum_err = static_cast<double>(len) * 0x1p-24;
  return log ? Tolerance{2e-6 * (1 + std::log2(static_cast<double>(len))) + sum_err, 0x1p-21}
             : Tolerance{1e-44, 0x1p-21 + sum_err};
}

const int64_t kLens[] = {1, 2, 7, 15, 16, 17, 33, 100, 1000, 4099};

TEST(Softmax, SimdMatchesScalarAndDouble) {
  for (bool log : {false, true}) {
    for (int64_t len : kLens) {
      const int64_t rows = 3;
      const std::vector<float> x = testing::random_f32(rows * len, 11 + len, -30.0f, 30.0f);
      const std::vector<float> ref = run_f32(x, rows, len, log, CpuIsa::kScalar);
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double> row(x.begin() + r * len, x.begin() + (r + 1) * len);
        const std::vector<double> want = softmax_f64(row, log);
        const double m = *std::max_element(row.begin(), row.end());
        for (int64_t k = 0; k < len; ++k) {
          // x - max is rounded in f32 (as torch does): exp then carries a relative error of
          // up to |x - max| * 2^-24 beyond the tolerance of the arithmetic after it.
          Tolerance tol = f32_tol(log, len);
          tol.rel += std::fabs(row[k] - m) * 0x1p-24;
          EXPECT_TRUE(close_enough(want[k], ref[r * len + k], tol))
              << "scalar len " << len << " log " << log << " k " << k << ": " << want[k] << " vs "
              << ref[r * len + k];
        }
      }
      for (CpuIsa isa : testing::simd_isas()) {
        const std::vector<float> got = run_f32(x, rows, len, log, isa);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(close_enough(ref[i], got[i], f32_tol(log, len)))
              << cpu_isa_name(isa) << " len " << len << " log " << log << " i " << i << ": "
              << ref[i] << " vs " << got[i];
        }
      }
    }
  }
}

TEST(Softmax, RowsSumToOne) {
  for (CpuIsa isa : testing::supported_isas()) {
    for (int64_t len : kLens) {
      const std::vector<float> x = testing::random_f32(2 * len, 5, -10.0f, 10.0f);
      const std::vector<float> y = run_f32(x, 2, len, false, isa);
      for (int r = 0; r < 2; ++r) {
        double s = 0;
        for (int64_t k = 0; k < len; ++k) s += y[r * len + k];
        EXPECT_NEAR(s, 1.0, 1e-6 + static_cast<double>(len) * 0x1p-24)
            << cpu_isa_name(isa) << " len " << len;
      }
    }
  }
}

// e^t / (1 + e^t) for t across exp's whole input range, down into subnormal results.
TEST(Softmax, ExpAccuracyOverItsRange) {
  for (CpuIsa isa : testing::supported_isas()) {
    std::vector<float> x;
    for (double t = -110; t <= 0; t += 0.0137) {
      x.push_back(0.0f);
      x.push_back(static_cast<float>(t));
    }
    const int64_t rows = static_cast<int64_t>(x.size() / 2);
    const std::vector<float> y = run_f32(x, rows, 2, false, isa);
    for (int64_t r = 0; r < rows; ++r) {
      const double t = x[2 * r + 1];
      const double want = std::exp(t) / (1 + std::exp(t));
      EXPECT_TRUE(close_enough(want, y[2 * r + 1], {0x1p-149, 0x1p-22}))
          << cpu_isa_name(isa) << " t " << t << ": " << want << " vs " << y[2 * r + 1];
    }
  }
}

TEST(Softmax, HandDerivedValuesAndInfinities) {
  const float ln3 = std::log(3.0f);
  for (CpuIsa isa : testing::supported_isas()) {
    const auto y = run_f32({0.0f, ln3, 5.0f, 5.0f, 5.0f, 5.0f}, 3, 2, false, isa);
    EXPECT_NEAR(y[0], 0.25f, 1e-7f);
    EXPECT_NEAR(y[1], 0.75f, 1e-7f);
    EXPECT_NEAR(y[2], 0.5f, 1e-7f);
    EXPECT_NEAR(y[5], 0.5f, 1e-7f);
    const auto l = run_f32({0.0f, 0.0f}, 1, 2, true, isa);
    EXPECT_NEAR(l[0], -std::log(2.0f), 1e-7f);
    // -Inf entries get exactly 0 (log: -Inf) and do not disturb the rest.
    const auto z = run_f32({-INFINITY, 0.0f, -INFINITY, ln3}, 1, 4, false, isa);
    EXPECT_EQ(z[0], 0.0f);
    EXPECT_EQ(z[2], 0.0f);
    EXPECT_NEAR(z[1], 0.25f, 1e-7f);
    EXPECT_NEAR(z[3], 0.75f, 1e-7f);
    const auto lz = run_f32({-INFINITY, 0.0f, -INFINITY, ln3}, 1, 4, true, isa);
    EXPECT_EQ(lz[0], -INFINITY);
    EXPECT_NEAR(lz[1], std::log(0.25f), 1e-6f);
    // All -Inf: NaN everywhere, as torch. A NaN anywhere: NaN everywhere.
    for (bool log : {false, true}) {
      const auto n = run_f32(std::vector<float>(19, -INFINITY), 1, 19, log, isa);
      for (float v : n) EXPECT_TRUE(std::isnan(v)) << cpu_isa_name(isa);
      std::vector<float> with_nan(19, 1.0f);
      with_nan[17] = NAN;
      for (float v : run_f32(with_nan, 1, 19, log, isa)) EXPECT_TRUE(std::isnan(v));
    }
    // Large values: max subtraction keeps them finite.
    const auto big = run_f32({1000.0f, 1000.0f, 3e38f, 0.0f, -1e30f, 0.0f}, 3, 2, false, isa);
    EXPECT_NEAR(big[0], 0.5f, 1e-7f);
    EXPECT_EQ(big[2], 1.0f);
    EXPECT_EQ(big[3], 0.0f);
    EXPECT_EQ(big[4], 0.0f);
    EXPECT_EQ(big[5], 1.0f);
    const auto lbig = run_f32({3e38f, 0.0f}, 1, 2, true, isa);
    EXPECT_EQ(lbig[0], 0.0f);
    EXPECT_EQ(lbig[1], -3e38f);
  }
}

TEST(Softmax, InPlace) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    for (bool log : {false, true}) {
      std::vector<float> x = testing::random_f32(3 * 37, 3, -5.0f, 5.0f);
      std::vector<float> separate(x.size());
      softmax(DType::kF32, 3, 37, x.data(), separate.data(), log);
      softmax(DType::kF32, 3, 37, x.data(), x.data(), log);
      EXPECT_EQ(x, separate) << cpu_isa_name(isa);
      std::vector<bfloat16> b(40);
      for (int i = 0; i < 40; ++i) b[i] = bfloat16(static_cast<float>(i % 7) - 3.0f);
      std::vector<bfloat16> bs(40);
      softmax(DType::kBF16, 2, 20, b.data(), bs.data(), log);
      softmax(DType::kBF16, 2, 20, b.data(), b.data(), log);
      for (int i = 0; i < 40; ++i) EXPECT_EQ(b[i].bits, bs[i].bits);
    }
  }
}

template <typename T>
void check_reduced(DType dtype, double out_rel) {
  const int64_t rows = 2, len = 45;
  const std::vector<float> xf = testing::random_f32(rows * len, 21, -8.0f, 8.0f);
  std::vector<T> x(xf.size()), y(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) x[i] = T(xf[i]);
  for (bool log : {false, true}) {
    for (CpuIsa isa : testing::supported_isas()) {
      ScopedCpuIsa scope(isa);
      softmax(dtype, rows, len, x.data(), y.data(), log);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> row;
        for (int64_t k = 0; k < len; ++k) row.push_back(static_cast<float>(x[r * len + k]));
        const auto want = softmax_f64(row, log);
        for (int64_t k = 0; k < len; ++k) {
          const double got = static_cast<float>(y[r * len + k]);
          EXPECT_TRUE(close_enough(want[k], got, {1e-6, out_rel}))
              << dtype << " " << cpu_isa_name(isa) << " log " << log << ": " << want[k] << " vs "
              << got;
        }
      }
    }
  }
}

TEST(Softmax, ReducedAndDoubleTypes) {
  check_reduced<half>(DType::kF16, 0x1p-10);
  check_reduced<bfloat16>(DType::kBF16, 0x1p-7);
  const std::vector<double> x = {1.0, 2.0, 3.0, -1e300, 0.5};
  std::vector<double> y(5);
  for (bool log : {false, true}) {
    softmax(DType::kF64, 1, 5, x.data(), y.data(), log);
    const auto want = softmax_f64(x, log);
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(y[k], want[k], 1e-15 * (1 + std::fabs(want[k])));
  }
}

TEST(Softmax, EmptyAndBadInput) {
  softmax(DType::kF32, 0, 10, nullptr, nullptr, false);
  softmax(DType::kF32, 10, 0, nullptr, nullptr, true);
  float x[2] = {0, 0};
  expect_error([&] { softmax(DType::kF32, -1, 2, x, x, false); }, ErrorKind::kInvalidArgument,
               {"softmax", "rows -1"});
  expect_error([&] { softmax(DType::kI32, 1, 2, x, x, true); }, ErrorKind::kNotSupported,
               {"log_softmax", "i32"});
  expect_error([&] { softmax(DType::kF32, 1, 2, nullptr, x, false); }, ErrorKind::kInvalidArgument,
               {"null"});
}

}  // namespace
}  // namespace braid::kernels::cpu
