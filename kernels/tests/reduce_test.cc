// reduce(): every SIMD level against kScalar bit for bit (the fixed order of
// docs/reductions-and-gemm.md, "Reduction order"), the order itself re-derived from the doc,
// accuracy against a long double / Kahan computation, hand-derived values, NaN, len == 0,
// integers and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;
using testing::simd_isas;

// A buffer of n elements of a float dtype, written and read through double.
struct Buf {
  DType dtype;
  std::vector<unsigned char> bytes;
  Buf(DType t, int64_t n) : dtype(t), bytes(static_cast<size_t>(n) * dtype_size(t)) {}
  void set(int64_t i, double v) {
    switch (dtype) {
      case DType::kF64:
        reinterpret_cast<double*>(bytes.data())[i] = v;
        break;
      case DType::kF32:
        reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v);
        break;
      case DType::kF16:
        reinterpret_cast<half*>(bytes.data())[i] = half(static_cast<float>(v));
        break;
      case DType::kBF16:
        reinterpret_cast<bfloat16*>(bytes.data())[i] = bfloat16(static_cast<float>(v));
        break;
      default:
        FAIL() << "unexpected dtype";
    }
  }
  double get(int64_t i) const {
    switch (dtype) {
      case DType::kF64:
        return reinterpret_cast<const double*>(bytes.data())[i];
      case DType::kF32:
        return reinterpret_cast<const float*>(bytes.data())[i];
      case DType::kF16:
        return static_cast<float>(reinterpret_cast<const half*>(bytes.data())[i]);
      case DType::kBF16:
        return static_cast<float>(reinterpret_cast<const bfloat16*>(bytes.data())[i]);
      default:
        return NAN;
    }
  }
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
};

// Values of widely varying magnitude and both signs, so that the summation order shows in
// the low bits.
Buf random_input(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-8, 8);
  Buf b(t, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, std::ldexp(mant(rng), expo(rng)));
  return b;
}

Buf run_reduce(ReduceOp op, const Buf& x, int64_t outer, int64_t len, int64_t inner, DType out_t,
               CpuIsa isa) {
  ScopedCpuIsa scope(isa);
  Buf out(out_t, outer * inner);
  reduce(op, x.dtype, outer, len, inner, x.data(), out_t, out.data());
  return out;
}

const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kNormL2};
const DType kFloatTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16};

struct Shape {
  int64_t outer, len, inner;
};
const Shape kShapes[] = {{1, 1, 1},    {1, 7, 1},    {1, 63, 1},   {1, 64, 1}, {2, 65, 1},
                         {3, 1000, 1}, {1, 4099, 1}, {2, 5, 2},    {3, 9, 7},  {2, 33, 16},
                         {1, 17, 64},  {2, 3, 67},   {1, 300, 31}, {2, 1, 100}};

std::vector<DType> out_types(DType in) {
  if (in == DType::kF64) return {DType::kF64};
  if (in == DType::kF32) return {DType::kF32, DType::kF64};
  return {in, DType::kF32, DType::kF64};
}

TEST(Reduce, EverySimdLevelMatchesScalarBitForBit) {
  for (DType t : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const Buf x = random_input(t, s.outer * s.len * s.inner, 1234 + static_cast<uint32_t>(s.len));
      for (ReduceOp op : kAllOps) {
        for (DType out_t : out_types(t)) {
          const Buf ref = run_reduce(op, x, s.outer, s.len, s.inner, out_t, CpuIsa::kScalar);
          for (CpuIsa isa : simd_isas()) {
            const Buf got = run_reduce(op, x, s.outer, s.len, s.inner, out_t, isa);
            EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.bytes.size()), 0)
                << cpu_isa_name(isa) << " op " << static_cast<int>(op) << " dtype " << t << " -> "
                << out_t << " shape [" << s.outer << ", " << s.len << ", " << s.inner << "]";
          }
        }
      }
    }
  }
}

// The order written in docs/reductions-and-gemm.md, re-implemented here from the text: f32
// accumulation, element k into lane k % 64, lanes folded by halving.
float documented_f32_sum(const std::vector<float>& x) {
  float lanes[64] = {};
  for (size_t k = 0; k < x.size(); ++k) lanes[k % 64] += x[k];
  for (int h = 32; h >= 1; h /= 2) {
    for (int i = 0; i < h; ++i) lanes[i] += lanes[i + h];
  }
  return lanes[0];
}

TEST(Reduce, SumFollowsTheDocumentedOrder) {
  // Large and small terms mixed, so a different order gives different bits.
  std::vector<float> x(1001);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (size_t k = 0; k < x.size(); ++k) x[k] = k % 5 == 0 ? d(rng) * 1e7f : d(rng);
  float naive = 0;
  for (float v : x) naive += v;
  const float expected = documented_f32_sum(x);
  ASSERT_NE(naive, expected) << "inputs should be order sensitive";
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    float got = 0;
    reduce(ReduceOp::kSum, DType::kF32, 1, static_cast<int64_t>(x.size()), 1, x.data(), DType::kF32,
           &got);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << cpu_isa_name(isa);
  }
}

// Independent reference: long double with Kahan compensation.
long double kahan(const std::vector<long double>& v) {
  long double sum = 0, c = 0;
  for (long double x : v) {
    const long double y = x - c;
    const long double t = sum + y;
    c = (t - sum) - y;
    sum = t;
  }
  return sum;
}

double output_eps(DType t) {
  switch (t) {
    case DType::kF64:
      return 0x1p-53;
    case DType::kF32:
      return 0x1p-24;
    case DType::kF16:
      return 0x1p-11;
    default:
      return 0x1p-8;
  }
}

TEST(Reduce, AccurateAgainstLongDoubleKahan) {
  for (DType t : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const Buf x = random_input(t, s.outer * s.len * s.inner, 99);
      for (DType out_t : out_types(t)) {
        const bool acc64 = t == DType::kF64 || out_t == DType::kF64;
        const double acc_eps = acc64 ? 0x1p-53 : 0x1p-24;
        const int lanes = acc64 ? 32 : 64;
        const double steps = s.inner == 1 ? s.len / lanes + 8.0 : s.len + 1.0;
        for (CpuIsa isa : testing::supported_isas()) {
          const Buf sum = run_reduce(ReduceOp::kSum, x, s.outer, s.len, s.inner, out_t, isa);
          const Buf mean = run_reduce(ReduceOp::kMean, x, s.outer, s.len, s.inner, out_t, isa);
          const Buf nrm = run_reduce(ReduceOp::kNormL2, x, s.outer, s.len, s.inner, out_t, isa);
          const Buf mx = run_reduce(ReduceOp::kMax, x, s.outer, s.len, s.inner, out_t, isa);
          for (int64_t o = 0; o < s.outer; ++o) {
            for (int64_t i = 0; i < s.inner; ++i) {
              std::vector<long double> v, sq;
              long double abs_sum = 0, best = -INFINITY;
              for (int64_t k = 0; k < s.len; ++k) {
                const long double e = x.get((o * s.len + k) * s.inner + i);
                v.push_back(e);
                sq.push_back(e * e);
                abs_sum += std::fabs(e);
                best = std::max(best, e);
              }
              const long double ref = kahan(v), ref_sq = kahan(sq);
              const double bound = steps * acc_eps * static_cast<double>(abs_sum);
              const int64_t j = o * s.inner + i;
              const double out_rel = output_eps(out_t);
              EXPECT_NEAR(sum.get(j), static_cast<double>(ref),
                          bound + out_rel * std::fabs(static_cast<double>(ref)))
                  << cpu_isa_name(isa) << " sum " << t << "->" << out_t;
              EXPECT_NEAR(mean.get(j), static_cast<double>(ref / s.len),
                          (bound + out_rel * std::fabs(static_cast<double>(ref))) / s.len * 1.01)
                  << cpu_isa_name(isa) << " mean " << t << "->" << out_t;
              const double ref_n = std::sqrt(static_cast<double>(ref_sq));
              EXPECT_NEAR(nrm.get(j), ref_n, ref_n * (steps * acc_eps + 2 * out_rel) + 1e-300)
                  << cpu_isa_name(isa) << " norm " << t << "->" << out_t;
              EXPECT_EQ(mx.get(j), static_cast<double>(best)) << cpu_isa_name(isa) << " max";
            }
          }
        }
      }
    }
  }
}

TEST(Reduce, HandDerivedValues) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    std::vector<float> x(100);
    for (int i = 0; i < 100; ++i) x[i] = static_cast<float>(i + 1);
    float r = 0;
    reduce(ReduceOp::kSum, DType::kF32, 1, 100, 1, x.data(), DType::kF32, &r);
    EXPECT_EQ(r, 5050.0f);
    reduce(ReduceOp::kMean, DType::kF32, 1, 100, 1, x.data(), DType::kF32, &r);
    EXPECT_EQ(r, 50.5f);
    reduce(ReduceOp::kMax, DType::kF32, 1, 100, 1, x.data(), DType::kF32, &r);
    EXPECT_EQ(r, 100.0f);
    reduce(ReduceOp::kMin, DType::kF32, 1, 100, 1, x.data(), DType::kF32, &r);
    EXPECT_EQ(r, 1.0f);
    const double v[2] = {3.0, -4.0};
    double n = 0;
    reduce(ReduceOp::kNormL2, DType::kF64, 1, 2, 1, v, DType::kF64, &n);
    EXPECT_EQ(n, 5.0);
    // [outer 2, len 3, inner 2]: columns reduce over the middle axis.
    const float c[12] = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
    float out[4];
    reduce(ReduceOp::kSum, DType::kF32, 2, 3, 2, c, DType::kF32, out);
    EXPECT_EQ(out[0], 9.0f);
    EXPECT_EQ(out[1], 12.0f);
    EXPECT_EQ(out[2], -9.0f);
    EXPECT_EQ(out[3], -12.0f);
    reduce(ReduceOp::kMin, DType::kF32, 2, 3, 2, c, DType::kF32, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[3], -6.0f);
    // bf16 in, f32 out: 1 + 2^-7 is exact in bf16 (8 significant bits); 256 of them sum to 258
    // exactly in f32, while a bf16 accumulator would have stalled.
    std::vector<bfloat16> b(256, bfloat16(1.0078125f));
    reduce(ReduceOp::kSum, DType::kBF16, 1, 256, 1, b.data(), DType::kF32, &r);
    EXPECT_EQ(r, 258.0f);
  }
}

TEST(Reduce, MaxMinPropagateNaNAndSumPropagatesInf) {
  for (CpuIsa isa : testing::supported_isas()) {
    ScopedCpuIsa scope(isa);
    for (int64_t len : {1, 5, 64, 70, 200}) {
      for (int64_t pos : {int64_t{0}, len / 2, len - 1}) {
        std::vector<float> x(static_cast<size_t>(len), 1.0f);
        x[pos] = NAN;
        for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kSum}) {
          float r = 0;
          reduce(op, DType::kF32, 1, len, 1, x.data(), DType::kF32, &r);
          EXPECT_TRUE(std::isnan(r)) << cpu_isa_name(isa) << " len " << len << " pos " << pos;
        }
        // Columns: NaN in column 1 only.
        std::vector<float> cols(static_cast<size_t>(len * 3), 2.0f);
        cols[pos * 3 + 1] = NAN;
        float out[3];
        reduce(ReduceOp::kMax, DType::kF32, 1, len, 3, cols.data(), DType::kF32, out);
        EXPECT_EQ(out[0], 2.0f);
        EXPECT_TRUE(std::isnan(out[1]));
        EXPECT_EQ(out[2], 2.0f);
        x[pos] = INFINITY;
        float s = 0;
        reduce(ReduceOp::kSum, DType::kF32, 1, len, 1, x.data(), DType::kF32, &s);
        EXPECT_EQ(s, INFINITY);
      }
    }
  }
}

TEST(Reduce, EmptyAxis) {
  float out[3] = {7, 7, 7};
  reduce(ReduceOp::kSum, DType::kF32, 1, 0, 3, nullptr, DType::kF32, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  reduce(ReduceOp::kMean, DType::kF32, 1, 0, 3, nullptr, DType::kF32, out);
  EXPECT_TRUE(std::isnan(out[1]));
  reduce(ReduceOp::kNormL2, DType::kF32, 3, 0, 1, nullptr, DType::kF32, out);
  EXPECT_EQ(out[1], 0.0f);
  expect_error([&] { reduce(ReduceOp::kMax, DType::kF32, 1, 0, 3, nullptr, DType::kF32, out); },
               ErrorKind::kInvalidArgument, {"max", "len is 0"});
  // An empty output touches nothing.
  reduce(ReduceOp::kSum, DType::kF32, 0, 5, 3, nullptr, DType::kF32, nullptr);
}

TEST(Reduce, Integers) {
  const int32_t x[6] = {5, -3, 9, 2147483647, 1, -7};
  int32_t r32 = 0;
  int64_t r64 = 0;
  reduce(ReduceOp::kMax, DType::kI32, 1, 6, 1, x, DType::kI32, &r32);
  EXPECT_EQ(r32, 2147483647);
  reduce(ReduceOp::kMin, DType::kI32, 1, 6, 1, x, DType::kI32, &r32);
  EXPECT_EQ(r32, -7);
  reduce(ReduceOp::kSum, DType::kI32, 1, 6, 1, x, DType::kI64, &r64);
  EXPECT_EQ(r64, int64_t{2147483647} + 5 - 3 + 9 + 1 - 7);
  reduce(ReduceOp::kSum, DType::kI32, 1, 6, 1, x, DType::kI32, &r32);  // wraps, as torch
  EXPECT_EQ(r32, static_cast<int32_t>(int64_t{2147483647} + 5 - 3 + 9 + 1 - 7 - 4294967296LL));
  const int64_t y[6] = {1, 2, 3, 4, 5, 6};  // [1, 3, 2]
  int64_t cols[2];
  reduce(ReduceOp::kSum, DType::kI64, 1, 3, 2, y, DType::kI64, cols);
  EXPECT_EQ(cols[0], 9);
  EXPECT_EQ(cols[1], 12);
  expect_error([&] { reduce(ReduceOp::kMean, DType::kI32, 1, 6, 1, x, DType::kI32, &r32); },
               ErrorKind::kNotSupported, {"mean", "i32"});
  expect_error([&] { reduce(ReduceOp::kSum, DType::kI32, 1, 6, 1, x, DType::kF32, &r32); },
               ErrorKind::kInvalidArgument, {"out_dtype", "f32"});
}

TEST(Reduce, BadInput) {
  float x[4] = {1, 2, 3, 4}, r = 0;
  expect_error([&] { reduce(ReduceOp::kSum, DType::kF32, 1, -4, 1, x, DType::kF32, &r); },
               ErrorKind::kInvalidArgument, {"len -4"});
  expect_error([&] { reduce(ReduceOp::kSum, DType::kU8, 1, 4, 1, x, DType::kU8, &r); },
               ErrorKind::kNotSupported, {"u8"});
  expect_error([&] { reduce(ReduceOp::kSum, DType::kF64, 1, 2, 1, x, DType::kF32, &r); },
               ErrorKind::kInvalidArgument, {"out_dtype f32", "f64"});
  expect_error([&] { reduce(ReduceOp::kSum, DType::kF32, 1, 4, 1, x, DType::kBF16, &r); },
               ErrorKind::kInvalidArgument, {"out_dtype bf16"});
  expect_error([&] { reduce(ReduceOp::kSum, DType::kF32, 1, 4, 1, nullptr, DType::kF32, &r); },
               ErrorKind::kInvalidArgument, {"null"});
}

}  // namespace
}  // namespace braid::kernels::cpu
