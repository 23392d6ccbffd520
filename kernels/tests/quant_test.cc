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

// memcmp of two float arrays, defined for n == 0 too (an empty vector's data() may be null).
bool same_bits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

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
  for (int64_t k : {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 768}) {
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
  // Near the int32 limit (k just below 133,000, every product +-127^2): exact at every level,
  // including the VNNI path's biased sums, which wrap on the way.
  {
    const int64_t k = 132999;
    std::vector<int8_t> a(2 * k, 127), b(2 * k, 127);
    for (int64_t p = 0; p < k; ++p) a[k + p] = -127;
    for (CpuIsa isa : testing::supported_isas()) {
      ScopedCpuIsa level(isa);
      std::vector<int32_t> c(4);
      gemm_i8_i32(a.data(), b.data(), 2, 2, k, c.data());
      EXPECT_EQ(c[0], int32_t{132999 * 16129}) << int(isa);
      EXPECT_EQ(c[2], -int32_t{132999 * 16129}) << int(isa);
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
      EXPECT_TRUE(same_bits(y.data(), ref.data(), n)) << n;
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cpu

#include "braid/core/thread_pool.h"
#include "braid/kernels/cpu.h"

namespace braid::kernels::cpu {
namespace {

// A 4-bit weight [n, k] in quantize_4bit's format, dequantized independently of the kernels
// (code[nibble] * absmax, nibble by the documented packing) for the references below.
struct Weight4 {
  std::vector<uint8_t> packed;
  std::vector<float> absmax;
  std::vector<float> w;  // [n, k]
};

Weight4 make_weight4(Quant4Type type, int64_t n, int64_t k, int64_t blocksize, uint32_t seed) {
  const int64_t count = n * k;
  const std::vector<float> src = randn(count, seed, 0.05f);
  Weight4 q;
  q.packed.resize((count + 1) / 2);
  q.absmax.resize((count + blocksize - 1) / blocksize);
  quantize_4bit(type, src.data(), count, blocksize, q.packed.data(), q.absmax.data());
  const float* code = quant4_code(type);
  q.w.resize(count);
  for (int64_t e = 0; e < count; ++e) {
    const uint8_t byte = q.packed[e / 2];
    q.w[e] = code[e % 2 == 0 ? byte >> 4 : byte & 0x0F] * q.absmax[e / blocksize];
  }
  return q;
}

// The stated bound of Note [gemm_4bit order]: the f32 products of the dequantized weight summed
// in 16 fma lanes and a 4-step fold, so within (ceil(k / 16) + 4) u sum |x w| of the exact sum.
void expect_within_order_bound(const std::vector<float>& y, const std::vector<float>& x,
                               const std::vector<float>& w, int64_t m, int64_t n, int64_t k,
                               const char* what) {
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = double{x[i * k + p]} * w[j * k + p];
        ref += prod;
        mag += std::fabs(prod);
      }
      const double bound = ((k + 15) / 16 + 4) * u * mag * 1.01 + 1e-30;
      ASSERT_LE(std::fabs(y[i * n + j] - ref), bound)
          << what << " m " << m << " n " << n << " k " << k << " at " << i << "," << j;
    }
  }
}

struct Gemm4Case {
  int64_t m, n, k, blocksize;
};

// Odd k (rows start on a low nibble), k below one vector, blocks that straddle rows, a block
// size that is not 64, n that is not a multiple of the tile or the 4-row inner block, GPT-2's
// 768, and the empty cases.
const std::vector<Gemm4Case>& gemm4_cases() {
  static const std::vector<Gemm4Case> cases = {{1, 1, 1, 64},   {1, 7, 33, 64},   {3, 70, 768, 64},
                                               {5, 13, 100, 6}, {2, 300, 64, 64}, {4, 9, 17, 64},
                                               {7, 5, 15, 2},   {1, 33, 129, 64}, {0, 5, 5, 64},
                                               {4, 3, 0, 64},   {3, 0, 16, 64}};
  return cases;
}

TEST(Gemm4bit, MatchesDequantizedF64ReferenceWithinStatedBoundAtEveryLevel) {
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4}) {
    for (const Gemm4Case& c : gemm4_cases()) {
      const Weight4 q = make_weight4(type, c.n, c.k, c.blocksize, 100 + uint32_t(c.k));
      const std::vector<float> x = randn(c.m * c.k, 200 + uint32_t(c.n));
      std::vector<float> ref_bits;
      for (CpuIsa isa : testing::supported_isas()) {
        ScopedCpuIsa level(isa);
        std::vector<float> y(c.m * c.n, -99.0f);
        gemm_4bit(quant4_code(type), q.packed.data(), q.absmax.data(), c.blocksize, c.m, c.n, c.k,
                  x.data(), DType::kF32, y.data(), DType::kF32);
        expect_within_order_bound(y, x, q.w, c.m, c.n, c.k, "f32");
        // The order is the same at every level: the scalar level's bits.
        if (isa == CpuIsa::kScalar) {
          ref_bits = y;
        } else {
          EXPECT_TRUE(same_bits(y.data(), ref_bits.data(), y.size()))
              << "isa " << int(isa) << " m " << c.m << " n " << c.n << " k " << c.k;
        }
      }
    }
  }
}

TEST(Gemm4bit, ThreadCountNeverChangesTheBits) {
  const int64_t m = 3, n = 700, k = 96;  // several tiles
  const Weight4 q = make_weight4(Quant4Type::kNf4, n, k, 64, 5);
  const std::vector<float> x = randn(m * k, 6);
  std::vector<float> one(m * n), two(m * n);
  const int saved = get_num_threads();
  set_num_threads(1);
  gemm_4bit(quant4_code(Quant4Type::kNf4), q.packed.data(), q.absmax.data(), 64, m, n, k, x.data(),
            DType::kF32, one.data(), DType::kF32);
  set_num_threads(2);
  gemm_4bit(quant4_code(Quant4Type::kNf4), q.packed.data(), q.absmax.data(), 64, m, n, k, x.data(),
            DType::kF32, two.data(), DType::kF32);
  set_num_threads(saved);
  EXPECT_TRUE(same_bits(one.data(), two.data(), one.size()));
  expect_within_order_bound(two, x, q.w, m, n, k, "two threads");
}

// gemm_4bit_nn: y = x · W (the input gradient), each element the sequential fma sum over W's
// rows, so within n u sum_j |x_ij W_jp| of the exact sum; the same bits at every level and for
// one or two threads.
TEST(Gemm4bit, NnMatchesDequantizedF64ReferenceAtEveryLevelAndThreadCount) {
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4}) {
    for (const Gemm4Case& c : gemm4_cases()) {
      // x is m x n here, W n x k as before.
      const Weight4 q = make_weight4(type, c.n, c.k, c.blocksize, 300 + uint32_t(c.k));
      const std::vector<float> x = randn(c.m * c.n, 400 + uint32_t(c.n));
      std::vector<float> ref_bits;
      for (CpuIsa isa : testing::supported_isas()) {
        for (int threads : {1, 2}) {
          ScopedCpuIsa level(isa);
          const int saved = get_num_threads();
          set_num_threads(threads);
          std::vector<float> y(c.m * c.k, -99.0f);
          gemm_4bit_nn(quant4_code(type), q.packed.data(), q.absmax.data(), c.blocksize, c.m, c.n,
                       c.k, x.data(), DType::kF32, y.data(), DType::kF32);
          set_num_threads(saved);
          const double u = std::ldexp(1.0, -24);
          for (int64_t i = 0; i < c.m; ++i) {
            for (int64_t p = 0; p < c.k; ++p) {
              double ref = 0, mag = 0;
              for (int64_t j = 0; j < c.n; ++j) {
                const double prod = double{x[i * c.n + j]} * q.w[j * c.k + p];
                ref += prod;
                mag += std::fabs(prod);
              }
              ASSERT_LE(std::fabs(y[i * c.k + p] - ref), c.n * u * mag * 1.01 + 1e-30)
                  << "m " << c.m << " n " << c.n << " k " << c.k << " at " << i << "," << p;
            }
          }
          if (ref_bits.empty()) {
            ref_bits = y;
          } else {
            EXPECT_TRUE(same_bits(y.data(), ref_bits.data(), y.size()))
                << "isa " << int(isa) << " threads " << threads << " k " << c.k;
          }
        }
      }
    }
  }
}

// bf16 / f16 at the edges: x widened exactly, y rounded once, so the result is the f32 kernel's
// on the widened x, rounded.
TEST(Gemm4bit, HalfInputAndOutputConvertAtTheEdges) {
  const int64_t m = 4, n = 37, k = 130;
  const Weight4 q = make_weight4(Quant4Type::kFp4, n, k, 64, 8);
  const std::vector<float> x = randn(m * k, 9);
  for (DType half : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> xh(m * k), yh(m * n), want(m * n);
    std::vector<float> xw(m * k), y32(m * n);
    cast(x.data(), DType::kF32, xh.data(), half, m * k);
    cast(xh.data(), half, xw.data(), DType::kF32, m * k);
    gemm_4bit(quant4_code(Quant4Type::kFp4), q.packed.data(), q.absmax.data(), 64, m, n, k,
              xh.data(), half, yh.data(), half);
    gemm_4bit(quant4_code(Quant4Type::kFp4), q.packed.data(), q.absmax.data(), 64, m, n, k,
              xw.data(), DType::kF32, y32.data(), DType::kF32);
    cast(y32.data(), DType::kF32, want.data(), half, m * n);
    EXPECT_EQ(yh, want) << half;
    expect_within_order_bound(y32, xw, q.w, m, n, k, "widened");
  }
}

// Note [gemm_4bit on AMX]: at the amx level a bf16 x of >= 32 rows with k % 32 == 0 multiplies
// the weight rounded to bf16 on AMX tiles. Each result is within (k / 32 + 2) u sum |x bf16(w)|
// of the exact sum with the rounded weight (a bound the unrounded weight's products miss by far,
// so it also shows the tile path ran); a bf16 y is the f32 y rounded; one and two threads give
// the same bits; 31 rows keep the fused f32 path (the avx512bf16 level's bits).
TEST(Gemm4bit, AmxLevelRoundsTheWeightToBf16WithinItsBound) {
  if (!cpu_supports(CpuIsa::kAmx)) GTEST_SKIP() << "this CPU (or its OS) offers no AMX";
  const double u = std::ldexp(1.0, -24);
  struct Case {
    int64_t m, n, k;
  };
  for (const Case c : {Case{32, 37, 64}, Case{33, 300, 768}, Case{128, 70, 96}, Case{40, 5, 32},
                       Case{31, 40, 64}}) {
    const Weight4 q = make_weight4(Quant4Type::kNf4, c.n, c.k, 64, 500 + uint32_t(c.k));
    const std::vector<float> x = randn(c.m * c.k, 600 + uint32_t(c.n));
    std::vector<uint16_t> xh(c.m * c.k);
    std::vector<float> xw(c.m * c.k), wb(c.n * c.k);
    cast(x.data(), DType::kF32, xh.data(), DType::kBF16, c.m * c.k);
    cast(xh.data(), DType::kBF16, xw.data(), DType::kF32, c.m * c.k);
    std::vector<uint16_t> tmp(c.n * c.k);
    cast(q.w.data(), DType::kF32, tmp.data(), DType::kBF16, c.n * c.k);
    cast(tmp.data(), DType::kBF16, wb.data(), DType::kF32, c.n * c.k);
    std::vector<float> y(c.m * c.n, -99.0f), y_other(c.m * c.n, -99.0f), y2(c.m * c.n);
    std::vector<uint16_t> yh(c.m * c.n), want(c.m * c.n);
    const float* code = quant4_code(Quant4Type::kNf4);
    {
      ScopedCpuIsa level(CpuIsa::kAmx);
      gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, c.m, c.n, c.k, xh.data(), DType::kBF16,
                y.data(), DType::kF32);
      gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, c.m, c.n, c.k, xh.data(), DType::kBF16,
                yh.data(), DType::kBF16);
      const int saved = get_num_threads();
      set_num_threads(saved == 1 ? 2 : 1);
      gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, c.m, c.n, c.k, xh.data(), DType::kBF16,
                y2.data(), DType::kF32);
      set_num_threads(saved);
    }
    {
      ScopedCpuIsa level(CpuIsa::kAvx512Bf16);
      gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, c.m, c.n, c.k, xh.data(), DType::kBF16,
                y_other.data(), DType::kF32);
    }
    EXPECT_TRUE(same_bits(y.data(), y2.data(), y.size())) << "threads, m " << c.m;
    if (c.m < 32) {
      EXPECT_TRUE(same_bits(y.data(), y_other.data(), y.size())) << "fused path, m " << c.m;
      continue;
    }
    cast(y.data(), DType::kF32, want.data(), DType::kBF16, c.m * c.n);
    EXPECT_EQ(yh, want) << "bf16 y, m " << c.m;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double prod = double{xw[i * c.k + p]} * wb[j * c.k + p];
          ref += prod;
          mag += std::fabs(prod);
        }
        ASSERT_LE(std::fabs(y[i * c.n + j] - ref), (c.k / 32 + 2) * u * mag * 1.01 + 1e-30)
            << "m " << c.m << " n " << c.n << " k " << c.k << " at " << i << "," << j;
      }
    }
  }
}

TEST(Gemm4bit, BadArguments) {
  const Weight4 q = make_weight4(Quant4Type::kNf4, 2, 64, 64, 1);
  std::vector<float> x(64), y(2);
  const float* code = quant4_code(Quant4Type::kNf4);
  expect_error(
      [&] {
        gemm_4bit(code, q.packed.data(), q.absmax.data(), 63, 1, 2, 64, x.data(), DType::kF32,
                  y.data(), DType::kF32);
      },
      ErrorKind::kInvalidArgument, {"blocksize", "63"});
  expect_error(
      [&] {
        gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, 1, 2, 64, x.data(), DType::kI32,
                  y.data(), DType::kF32);
      },
      ErrorKind::kNotSupported, {"gemm_4bit", "i32"});
  expect_error(
      [&] {
        gemm_4bit(code, q.packed.data(), q.absmax.data(), 64, -1, 2, 64, x.data(), DType::kF32,
                  y.data(), DType::kF32);
      },
      ErrorKind::kInvalidArgument, {"negative"});
  expect_error(
      [&] {
        gemm_4bit(code, nullptr, q.absmax.data(), 64, 1, 2, 64, x.data(), DType::kF32, y.data(),
                  DType::kF32);
      },
      ErrorKind::kInvalidArgument, {"null"});
}

// LLM.int8's row quantization at every level: the scalar bits, with ties (x * scale = n + 0.5),
// NaN, Inf, -0, outliers (threshold 6) and every tail length.
TEST(QuantIsa, Int8RowsEveryLevelMatchesScalar) {
  for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 33, 100, 768}) {
    const int64_t rows = 5;
    std::vector<float> x = randn(rows * cols, 60 + uint32_t(cols), 2.0f);
    // Row 1: absmax 127 exactly, so scale is 1 and halves are ties.
    for (int64_t c = 0; c < cols; ++c) x[cols + c] = static_cast<float>(c % 7) - 3.5f;
    x[cols] = 127.0f;
    x[2 * cols] = std::numeric_limits<float>::quiet_NaN();
    if (cols > 2) x[2 * cols + 2] = -0.0f;
    x[3 * cols + cols / 2] = std::numeric_limits<float>::infinity();
    if (cols > 3) x[4 * cols + 3] = -9.0f;  // an outlier at threshold 6
    for (float threshold : {0.0f, 6.0f}) {
      std::vector<int8_t> q_ref(rows * cols);
      std::vector<float> a_ref(rows);
      std::vector<int64_t> o_ref(cols);
      int64_t n_ref;
      {
        ScopedCpuIsa scalar(CpuIsa::kScalar);
        n_ref = quantize_int8_rows(x.data(), rows, cols, threshold, q_ref.data(), a_ref.data(),
                                   o_ref.data());
      }
      if (cols >= 8 && threshold == 0) {
        EXPECT_EQ(q_ref[cols + 1], -2);  // -2.5 -> -2 (half to even)
        EXPECT_EQ(q_ref[cols + 2], -2);  // -1.5 -> -2
      }
      for (CpuIsa isa : testing::simd_isas()) {
        ScopedCpuIsa level(isa);
        std::vector<int8_t> q(rows * cols, 99);
        std::vector<float> a(rows, -1);
        std::vector<int64_t> o(cols, -1);
        const int64_t n_out =
            quantize_int8_rows(x.data(), rows, cols, threshold, q.data(), a.data(), o.data());
        EXPECT_EQ(n_out, n_ref) << cols;
        EXPECT_EQ(q, q_ref) << "cols " << cols << " threshold " << threshold << " isa " << int(isa);
        EXPECT_TRUE(same_bits(a.data(), a_ref.data(), rows)) << cols;
        for (int64_t i = 0; i < n_ref; ++i) EXPECT_EQ(o[i], o_ref[i]);
      }
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
