// cpu_quant.h: the code tables' published values, nibble packing order, 4-bit and 8-bit
// round trips within the error their code spacing allows, double-quantization's nested code,
// LLM.int8's row quantization, int8 GEMM exactness, and int8_linear against an f32 matmul
// with and without outlier columns. Bit-exact codes against an independent implementation
// of bitsandbytes' algorithm are in tests/reference/bnb_reference_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "braid/kernels/cpu_quant.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

TEST(QuantCode, PublishedValues) {
  const float* nf4 = quant4_code(Quant4Type::kNf4);
  EXPECT_EQ(nf4[0], -1.0f);
  EXPECT_EQ(nf4[7], 0.0f);
  EXPECT_EQ(nf4[15], 1.0f);
  EXPECT_EQ(nf4[8], 0.07958029955625534f);
  for (int i = 1; i < 16; ++i) EXPECT_LT(nf4[i - 1], nf4[i]);
  const float* fp4 = quant4_code(Quant4Type::kFp4);
  EXPECT_EQ(fp4[0b0011], 1.0f);             // 12 / 12
  EXPECT_EQ(fp4[0b0001], 0.0625f / 12.0f);  // the subnormal
  EXPECT_EQ(fp4[0b1010], -8.0f / 12.0f);    // sign bit
  EXPECT_FALSE(std::signbit(fp4[0b1000]));  // +0, as in bitsandbytes
  const float* dyn = dynamic_code_signed();
  EXPECT_EQ(dyn[255], 1.0f);
  for (int i = 1; i < 256; ++i) EXPECT_LE(dyn[i - 1], dyn[i]);
  int zeros = 0;
  for (int i = 0; i < 256; ++i) zeros += dyn[i] == 0.0f;
  EXPECT_EQ(zeros, 1);
  EXPECT_NEAR(dyn[0], -0.99296875f, 1e-6);  // -(1) * mean(linspace(0.1, 1, 65)[-2:])
}

TEST(Quant4, PackingHighNibbleFirst) {
  // Block absmax 1: x = code values exactly, so each quantizes to its own index.
  const float* nf4 = quant4_code(Quant4Type::kNf4);
  std::vector<float> x = {nf4[15], nf4[0], nf4[7], nf4[9], nf4[3]};
  std::vector<uint8_t> packed(3);
  float absmax = 0;
  quantize_4bit(Quant4Type::kNf4, x.data(), 5, 64, packed.data(), &absmax);
  EXPECT_EQ(absmax, 1.0f);
  EXPECT_EQ(packed[0], 0xF0);
  EXPECT_EQ(packed[1], 0x79);
  EXPECT_EQ(packed[2], 0x30);  // odd n: the last low nibble stays 0
}

TEST(Quant4, FourBitRoundTripWithinHalfACodeGap) {
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4}) {
    const float* code = quant4_code(type);
    float max_gap = 0;  // largest distance between neighbouring sorted code values
    std::vector<float> sorted(code, code + 16);
    std::sort(sorted.begin(), sorted.end());
    for (int i = 1; i < 16; ++i) max_gap = std::max(max_gap, sorted[i] - sorted[i - 1]);
    for (int64_t n : {0, 1, 63, 64, 65, 1000}) {
      const std::vector<float> x = randn(n, 7 + static_cast<uint32_t>(n));
      const int64_t blocks = (n + 63) / 64;
      std::vector<uint8_t> packed((n + 1) / 2);
      std::vector<float> absmax(blocks), y(n);
      quantize_4bit(type, x.data(), n, 64, packed.data(), absmax.data());
      dequantize_4bit(code, packed.data(), absmax.data(), n, 64, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const float bound = absmax[i / 64] * max_gap / 2 * 1.0001f;
        ASSERT_LE(std::fabs(y[i] - x[i]), bound)
            << "type " << int(type) << " n " << n << " i " << i;
      }
      // Each block's largest element is reproduced exactly (code +-1 times absmax).
      for (int64_t b = 0; b < blocks; ++b) {
        float best = 0;
        for (int64_t i = b * 64; i < std::min(n, (b + 1) * 64); ++i) {
          best = std::max(best, std::fabs(y[i]));
        }
        EXPECT_EQ(best, absmax[b]);
      }
    }
  }
}

TEST(Quant4, ZeroBlockAndBadInput) {
  std::vector<float> x(64, 0.0f);
  std::vector<uint8_t> packed(32);
  float absmax = -1;
  std::vector<float> y(64, 1.0f);
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4}) {
    quantize_4bit(type, x.data(), 64, 64, packed.data(), &absmax);
    EXPECT_EQ(absmax, 0.0f);
    dequantize_4bit(quant4_code(type), packed.data(), &absmax, 64, 64, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
  expect_error([&] { quantize_4bit(Quant4Type::kNf4, x.data(), 64, 63, packed.data(), &absmax); },
               ErrorKind::kInvalidArgument, {"blocksize", "63"});
  expect_error([&] { quantize_4bit(Quant4Type::kNf4, x.data(), -1, 64, packed.data(), &absmax); },
               ErrorKind::kInvalidArgument, {"negative"});
}

TEST(Quant8, BlockwiseDynamicRoundTrip) {
  const float* code = dynamic_code_signed();
  const int64_t n = 1000;
  std::vector<float> x = randn(n, 11);
  for (float& v : x) v = std::fabs(v) * 0.01f - 0.004f;  // absmax minus its mean, roughly
  std::vector<uint8_t> q(n);
  std::vector<float> absmax(4), y(n);
  quantize_blockwise_8bit(code, x.data(), n, 256, q.data(), absmax.data());
  dequantize_blockwise_8bit(code, q.data(), absmax.data(), n, 256, y.data());
  for (int64_t i = 0; i < n; ++i) {
    // The picked code is the nearest one: no other code value is closer to x / absmax.
    const float s = x[i] * (1.0f / absmax[i / 256]);
    const float err = std::fabs(code[q[i]] - s);
    for (int c = 0; c < 256; ++c) ASSERT_LE(err, std::fabs(code[c] - s) + 1e-7f) << i;
    EXPECT_LE(std::fabs(y[i] - x[i]), absmax[i / 256] * 0.0075f);
  }
}

TEST(Int8, RowQuantAndOutlierColumns) {
  // 2 x 4; column 2 holds an outlier (7 >= threshold 6) in row 1 only.
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 0.25f, 3.0f, 1.0f, 7.0f, -1.5f};
  std::vector<int8_t> q(8);
  std::vector<float> absmax(2);
  std::vector<int64_t> cols(4);
  EXPECT_EQ(quantize_int8_rows(x.data(), 2, 4, 0.0f, q.data(), absmax.data(), nullptr), 0);
  EXPECT_EQ(absmax[0], 2.0f);
  EXPECT_EQ(absmax[1], 7.0f);
  EXPECT_EQ(q[0], 64);  // 1 * 127 / 2 = 63.5 -> 64 (nearest even)
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[6], 127);
  EXPECT_EQ(quantize_int8_rows(x.data(), 2, 4, 6.0f, q.data(), absmax.data(), cols.data()), 1);
  EXPECT_EQ(cols[0], 2);
  EXPECT_EQ(absmax[1], 3.0f);  // the outlier is left out of row 1's absmax
  EXPECT_EQ(absmax[0], 2.0f);  // row 0's 0.5 in column 2 still counts (it is not >= 6)
  EXPECT_EQ(q[2], 0);          // the whole column is zero
  EXPECT_EQ(q[6], 0);
  EXPECT_EQ(q[4], 127);
}

TEST(Int8, GemmExactAndRefusesOverflow) {
  const int64_t m = 3, n = 5, k = 200;
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<int8_t> a(m * k), b(n * k);
  for (auto& v : a) v = static_cast<int8_t>(d(gen));
  for (auto& v : b) v = static_cast<int8_t>(d(gen));
  std::vector<int32_t> c(m * n);
  gemm_i8_i32(a.data(), b.data(), m, n, k, c.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += int64_t{a[i * k + p]} * b[j * k + p];
      EXPECT_EQ(c[i * n + j], ref);
    }
  expect_error([&] { gemm_i8_i32(a.data(), b.data(), 1, 1, 200000, c.data()); },
               ErrorKind::kNotSupported, {"overflow", "200000"});
}

// The stated error of LLM.int8 against the f32 product: each int8 rounding moves an element by
// at most half a step (absmax / 254), so |y - y_f32| <= sum_k (|x| * sw / 254 + |w| * sx / 254
// + sx * sw / 254^2), with sx, sw the row absmaxes; checked as that bound (plus f32 rounding).
void check_int8_linear(const std::vector<float>& x, int64_t m, int64_t k, int64_t n,
                       float threshold, int64_t want_outliers) {
  const std::vector<float> w = randn(n * k, 5, 0.05f);
  std::vector<int8_t> cb(n * k);
  std::vector<float> scb(n);
  quantize_int8_rows(w.data(), n, k, 0.0f, cb.data(), scb.data(), nullptr);
  std::vector<float> y(m * n);
  EXPECT_EQ(int8_linear(x.data(), m, k, cb.data(), scb.data(), n, threshold, y.data()),
            want_outliers);
  for (int64_t i = 0; i < m; ++i) {
    float sx = 0;
    for (int64_t p = 0; p < k; ++p) {
      const float a = std::fabs(x[i * k + p]);
      if (threshold == 0 || a < threshold) sx = std::max(sx, a);
    }
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, bound = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double xv = x[i * k + p], wv = w[j * k + p];
        ref += xv * wv;
        const bool outlier_col = threshold > 0 && std::fabs(xv) >= threshold;
        bound += std::fabs(xv) * scb[j] / 254 + (outlier_col ? 0 : std::fabs(wv) * sx / 254) +
                 sx * scb[j] / (254.0 * 254.0);
      }
      ASSERT_LE(std::fabs(y[i * n + j] - ref), bound * 1.01 + 1e-5) << i << "," << j;
    }
  }
}

TEST(Int8, LinearAgainstF32WithinStatedBound) {
  const int64_t m = 4, k = 96, n = 24;
  std::vector<float> x = randn(m * k, 9);
  check_int8_linear(x, m, k, n, 6.0f, 0);
  check_int8_linear(x, m, k, n, 0.0f, 0);
  x[1 * k + 5] = 40.0f;    // two outlier columns: with the decomposition they do not blow up
  x[3 * k + 70] = -25.0f;  // the other rows' int8 scale
  check_int8_linear(x, m, k, n, 6.0f, 2);
}

TEST(Int8, OutlierDecompositionHelps) {
  const int64_t m = 2, k = 64, n = 8;
  std::vector<float> x = randn(m * k, 21, 0.5f);
  x[10] = 60.0f;  // one large activation in row 0
  const std::vector<float> w = randn(n * k, 5, 0.05f);
  std::vector<int8_t> cb(n * k);
  std::vector<float> scb(n);
  quantize_int8_rows(w.data(), n, k, 0.0f, cb.data(), scb.data(), nullptr);
  std::vector<float> with(m * n), without(m * n);
  int8_linear(x.data(), m, k, cb.data(), scb.data(), n, 6.0f, with.data());
  int8_linear(x.data(), m, k, cb.data(), scb.data(), n, 0.0f, without.data());
  double err_with = 0, err_without = 0;
  for (int64_t j = 0; j < n; ++j) {  // row 0
    double ref = 0;
    for (int64_t p = 0; p < k; ++p) ref += double{x[p]} * w[j * k + p];
    err_with += std::fabs(with[j] - ref);
    err_without += std::fabs(without[j] - ref);
  }
  EXPECT_LT(err_with, err_without);
}

}  // namespace
}  // namespace braid::kernels::cpu

namespace braid::kernels::cpu {
namespace {

// Every SIMD level gives the scalar level's bits: the int8 dot products are exact integer sums
// and the 4-bit dequantization a lookup of the same products.
TEST(QuantIsa, EveryLevelMatchesScalar) {
  std::mt19937 gen(17);
  std::uniform_int_distribution<int> d(-127, 127);
  for (int64_t k : {1, 15, 16, 17, 31, 32, 33, 100, 768}) {
    const int64_t m = 3, n = 5;
    std::vector<int8_t> a(m * k), b(n * k);
    for (auto& v : a) v = static_cast<int8_t>(d(gen));
    for (auto& v : b) v = static_cast<int8_t>(d(gen));
    std::vector<int32_t> ref(m * n);
    {
      ScopedCpuIsa scalar(CpuIsa::kScalar);
      gemm_i8_i32(a.data(), b.data(), m, n, k, ref.data());
    }
    for (CpuIsa isa : testing::simd_isas()) {
      ScopedCpuIsa level(isa);
      std::vector<int32_t> c(m * n);
      gemm_i8_i32(a.data(), b.data(), m, n, k, c.data());
      EXPECT_EQ(c, ref) << "k " << k << " isa " << int(isa);
    }
  }
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 130, 1000}) {
    const std::vector<float> x = randn(n, 40 + static_cast<uint32_t>(n));
    std::vector<uint8_t> packed((n + 1) / 2);
    std::vector<float> absmax((n + 63) / 64), ref(n);
    quantize_4bit(Quant4Type::kNf4, x.data(), n, 64, packed.data(), absmax.data());
    {
      ScopedCpuIsa scalar(CpuIsa::kScalar);
      dequantize_4bit(quant4_code(Quant4Type::kNf4), packed.data(), absmax.data(), n, 64,
                      ref.data());
    }
    for (CpuIsa isa : testing::simd_isas()) {
      ScopedCpuIsa level(isa);
      std::vector<float> y(n);
      dequantize_4bit(quant4_code(Quant4Type::kNf4), packed.data(), absmax.data(), n, 64, y.data());
      EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), n * sizeof(float))) << n;
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
