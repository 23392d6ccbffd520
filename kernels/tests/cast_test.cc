// cast() and fill(): every SIMD level against float_types.h bit for bit (all f16 / bf16 /
// fp8 bit patterns, random f32 bit patterns, every loop-tail size), every dtype pair on
// hand-derived values, the documented rounding / saturation rules, and bad input.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "braid/core/float_types.h"
#include "braid/kernels/cpu.h"
#include "kernel_test_util.h"

namespace braid::kernels::cpu {
namespace {

using testing::expect_error;

// Bytes of n elements produced by ref(i) for each i.
template <class T, class Ref>
std::vector<T> expected(int64_t n, Ref&& ref) {
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = ref(i);
  return out;
}

template <class T>
uint32_t bits_of(T v) {
  if constexpr (sizeof(T) == 4)
    return std::bit_cast<uint32_t>(v);
  else if constexpr (sizeof(T) == 2)
    return std::bit_cast<uint16_t>(v);
  else
    return std::bit_cast<uint8_t>(v);
}

// Runs cast on src (n elements starting at `offset`, to catch misaligned pointers) and
// compares each output element's bits with want.
template <class S, class D>
void check_cast(const std::vector<S>& src, DType sd, const std::vector<D>& want, DType dd,
                CastMode mode, int64_t offset = 0) {
  const int64_t n = static_cast<int64_t>(src.size()) - offset;
  std::vector<D> got(src.size() + 1);
  cast(src.data() + offset, sd, got.data() + offset, dd, n, mode);
  int failures = 0;
  for (int64_t i = 0; i < n && failures < 5; ++i) {
    const uint32_t g = bits_of(got[offset + i]), w = bits_of(want[offset + i]);
    if (g != w) {
      ++failures;
      ADD_FAILURE() << sd << "->" << dd << " element " << i << " of " << n << ": src bits 0x"
                    << std::hex << bits_of(src[offset + i]) << " gave 0x" << g << ", want 0x" << w;
    }
  }
}

class CastIsaTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  ScopedCpuIsa isa_{GetParam()};
};

TEST_P(CastIsaTest, AllF16PatternsToF32AndBF16) {
  std::vector<half> src(65536);
  for (uint32_t i = 0; i < 65536; ++i) src[i] = half::from_bits(static_cast<uint16_t>(i));
  const int64_t n = 65536;
  check_cast(src, DType::kF16,
             expected<float>(n, [&](int64_t i) { return fp::f16_bits_to_f32(src[i].bits); }),
             DType::kF32, CastMode::kDefault);
  check_cast(
      src, DType::kF16,
      expected<bfloat16>(n, [&](int64_t i) { return bfloat16(fp::f16_bits_to_f32(src[i].bits)); }),
      DType::kBF16, CastMode::kDefault);
}

TEST_P(CastIsaTest, AllBF16PatternsToF32AndF16) {
  std::vector<bfloat16> src(65536);
  for (uint32_t i = 0; i < 65536; ++i) src[i] = bfloat16::from_bits(static_cast<uint16_t>(i));
  const int64_t n = 65536;
  check_cast(src, DType::kBF16,
             expected<float>(n, [&](int64_t i) { return fp::bf16_bits_to_f32(src[i].bits); }),
             DType::kF32, CastMode::kDefault);
  check_cast(src, DType::kBF16,
             expected<half>(n, [&](int64_t i) { return half(fp::bf16_bits_to_f32(src[i].bits)); }),
             DType::kF16, CastMode::kDefault);
}

TEST_P(CastIsaTest, AllFp8PatternsToF32) {
  std::vector<float8_e4m3fn> e4(256 * 3);
  std::vector<float8_e5m2> e5(256 * 3);
  for (int i = 0; i < 256 * 3; ++i) {
    e4[i] = float8_e4m3fn::from_bits(static_cast<uint8_t>(i));
    e5[i] = float8_e5m2::from_bits(static_cast<uint8_t>(i * 7));
  }
  const int64_t n = 256 * 3;
  check_cast(e4, DType::kF8E4M3,
             expected<float>(n, [&](int64_t i) { return static_cast<float>(e4[i]); }), DType::kF32,
             CastMode::kDefault);
  check_cast(e5, DType::kF8E5M2,
             expected<float>(n, [&](int64_t i) { return static_cast<float>(e5[i]); }), DType::kF32,
             CastMode::kDefault);
}

// f32 -> every narrow format, on random bit patterns plus specials, at every tail size and
// from an odd offset.
TEST_P(CastIsaTest, F32ToNarrowMatchesReference) {
  std::vector<int64_t> sizes = testing::tail_sizes();
  sizes.push_back(200000);
  for (int64_t size : sizes) {
    for (int64_t offset : {0, 1}) {
      if (offset > size) continue;
      const std::vector<float> src = testing::random_f32_bits(size, 17 + size);
      const auto want = [&](auto make) {
        using T = decltype(make(0.0f));
        return expected<T>(size, [&](int64_t i) { return make(src[i]); });
      };
      check_cast(src, DType::kF32, want([](float f) { return half(f); }), DType::kF16,
                 CastMode::kDefault, offset);
      check_cast(src, DType::kF32, want([](float f) { return bfloat16(f); }), DType::kBF16,
                 CastMode::kDefault, offset);
      check_cast(src, DType::kF32, want([](float f) { return float8_e4m3fn(f); }), DType::kF8E4M3,
                 CastMode::kDefault, offset);
      check_cast(src, DType::kF32, want([](float f) { return float8_e4m3fn::saturate(f); }),
                 DType::kF8E4M3, CastMode::kSaturate, offset);
      check_cast(src, DType::kF32, want([](float f) { return float8_e5m2(f); }), DType::kF8E5M2,
                 CastMode::kDefault, offset);
      check_cast(src, DType::kF32, want([](float f) { return float8_e5m2::saturate(f); }),
                 DType::kF8E5M2, CastMode::kSaturate, offset);
    }
  }
}

// Every f32 whose magnitude lies in the fp8 / f16 ranges, on a fine grid of bit patterns
// around each rounding boundary (ties, subnormals, the overflow threshold).
TEST_P(CastIsaTest, F32ToNarrowDenseGrid) {
  std::vector<float> src;
  for (uint32_t b = 0x30000000u; b < 0x48000000u; b += 0x1001u) {
    src.push_back(std::bit_cast<float>(b));
    src.push_back(-std::bit_cast<float>(b | 0x1000u));  // exact halfway points of fp8
  }
  const int64_t n = static_cast<int64_t>(src.size());
  check_cast(src, DType::kF32, expected<half>(n, [&](int64_t i) { return half(src[i]); }),
             DType::kF16, CastMode::kDefault);
  check_cast(src, DType::kF32,
             expected<float8_e4m3fn>(n, [&](int64_t i) { return float8_e4m3fn(src[i]); }),
             DType::kF8E4M3, CastMode::kDefault);
  check_cast(src, DType::kF32,
             expected<float8_e5m2>(n, [&](int64_t i) { return float8_e5m2(src[i]); }),
             DType::kF8E5M2, CastMode::kDefault);
}

INSTANTIATE_TEST_SUITE_P(Levels, CastIsaTest, ::testing::ValuesIn(testing::supported_isas()),
                         testing::isa_test_name);

// ---- every dtype pair, scalar rules, on values whose results are derived by hand ---------

// The value v written as dtype dt (v must be representable).
std::vector<unsigned char> encode(double v, DType dt) {
  std::vector<unsigned char> out(dtype_size(dt));
  auto put = [&](auto x) { std::memcpy(out.data(), &x, sizeof(x)); };
  switch (dt) {
    case DType::kF64:
      put(v);
      break;
    case DType::kF32:
      put(static_cast<float>(v));
      break;
    case DType::kF16:
      put(half(static_cast<float>(v)));
      break;
    case DType::kBF16:
      put(bfloat16(static_cast<float>(v)));
      break;
    case DType::kF8E4M3:
      put(float8_e4m3fn(static_cast<float>(v)));
      break;
    case DType::kF8E5M2:
      put(float8_e5m2(static_cast<float>(v)));
      break;
    case DType::kI64:
      put(static_cast<int64_t>(v));
      break;
    case DType::kI32:
      put(static_cast<int32_t>(v));
      break;
    case DType::kI16:
      put(static_cast<int16_t>(v));
      break;
    case DType::kI8:
      put(static_cast<int8_t>(v));
      break;
    case DType::kU8:
      put(static_cast<uint8_t>(static_cast<int>(v)));
      break;
    case DType::kBool:
      put(v != 0);
      break;
  }
  return out;
}

bool representable(double v, DType dt) {
  if (dt == DType::kBool) return v == 0 || v == 1;
  if (dt == DType::kU8) return v >= 0 && v == std::trunc(v);
  if (!is_floating(dt)) return v == std::trunc(v);
  return true;  // every test value is exact in every float format
}

// The result of casting v (exact in src) to dst, from the rules in cpu.h / cast_scalar.h.
double expected_value(double v, DType src, DType dst) {
  if (dst == DType::kBool) return v != 0;
  if (is_floating(dst)) return v;
  const double t = std::trunc(v);
  if (dst == DType::kU8) {
    if (is_floating(src)) return t < 0 ? 0 : t;  // float -> int saturates
    return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(v)));  // wraps
  }
  return t;
}

double decode(const unsigned char* p, DType dt) {
  auto get = [&](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (dt) {
    case DType::kF64:
      return get(double{});
    case DType::kF32:
      return get(float{});
    case DType::kF16:
      return static_cast<float>(get(half{}));
    case DType::kBF16:
      return static_cast<float>(get(bfloat16{}));
    case DType::kF8E4M3:
      return static_cast<float>(get(float8_e4m3fn{}));
    case DType::kF8E5M2:
      return static_cast<float>(get(float8_e5m2{}));
    case DType::kI64:
      return static_cast<double>(get(int64_t{}));
    case DType::kI32:
      return get(int32_t{});
    case DType::kI16:
      return get(int16_t{});
    case DType::kI8:
      return get(int8_t{});
    case DType::kU8:
      return get(uint8_t{});
    case DType::kBool:
      return get(bool{});
  }
  return NAN;
}

TEST(Cast, EveryPairOnExactValues) {
  const double values[] = {0, 1, -1, 3, -3, 96, -96, 0.5, -2.5, 1.75};
  for (int s = 0; s < kNumDTypes; ++s) {
    for (int d = 0; d < kNumDTypes; ++d) {
      const auto sd = static_cast<DType>(s), dd = static_cast<DType>(d);
      for (double v : values) {
        if (!representable(v, sd)) continue;
        const auto src = encode(v, sd);
        std::vector<unsigned char> dst(8, 0xcc);
        cast(src.data(), sd, dst.data(), dd, 1);
        EXPECT_EQ(decode(dst.data(), dd), expected_value(v, sd, dd))
            << "cast " << v << " from " << sd << " to " << dd;
      }
    }
  }
}

TEST(Cast, FloatToIntSaturatesAndTruncates) {
  const double src[] = {NAN, INFINITY, -INFINITY, 1e10, -1e10, 3.99, -3.99, 255.9, 256, -0.5};
  int32_t i32[10];
  uint8_t u8[10];
  int64_t i64[10];
  cast(src, DType::kF64, i32, DType::kI32, 10);
  cast(src, DType::kF64, u8, DType::kU8, 10);
  cast(src, DType::kF64, i64, DType::kI64, 10);
  const int32_t imax = std::numeric_limits<int32_t>::max(),
                imin = std::numeric_limits<int32_t>::min();
  const int32_t want32[] = {0, imax, imin, imax, imin, 3, -3, 255, 256, 0};
  const uint8_t want8[] = {0, 255, 0, 255, 0, 3, 0, 255, 255, 0};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(i32[i], want32[i]) << "f64 " << src[i] << " -> i32";
    EXPECT_EQ(u8[i], want8[i]) << "f64 " << src[i] << " -> u8";
  }
  EXPECT_EQ(i64[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(i64[2], std::numeric_limits<int64_t>::min());
  const float big = 0x1p63f;  // just out of int64 range
  int64_t out = 0;
  cast(&big, DType::kF32, &out, DType::kI64, 1);
  EXPECT_EQ(out, std::numeric_limits<int64_t>::max());
}

TEST(Cast, IntToIntWrapsAndBoolIsNonZero) {
  const int64_t src[] = {300, -1, -129, 0, 2};
  uint8_t u8[5];
  int8_t i8[5];
  bool b[5];
  cast(src, DType::kI64, u8, DType::kU8, 5);
  cast(src, DType::kI64, i8, DType::kI8, 5);
  cast(src, DType::kI64, b, DType::kBool, 5);
  EXPECT_EQ(u8[0], 44);
  EXPECT_EQ(u8[1], 255);
  EXPECT_EQ(i8[2], 127);
  EXPECT_EQ(b[0], true);
  EXPECT_EQ(b[3], false);
  const float nan = NAN;
  bool nb = false;
  cast(&nan, DType::kF32, &nb, DType::kBool, 1);
  EXPECT_TRUE(nb);
}

// Wide sources round once: through f32 rounded to odd, never twice to nearest.
TEST(Cast, WideSourcesRoundOnce) {
  // 1 + 2^-11 + 2^-40 lies just above the f16 halfway point between 1 and 1 + 2^-10; rounding
  // to f32 first would land exactly on the tie and then round down to 1.
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  half h;
  cast(&d, DType::kF64, &h, DType::kF16, 1);
  EXPECT_EQ(h.bits, 0x3c01);
  // 2^60 + 2^52 + 1 lies just above the bf16 halfway point between 2^60 and 2^60 + 2^53.
  const int64_t i = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  bfloat16 b;
  cast(&i, DType::kI64, &b, DType::kBF16, 1);
  EXPECT_EQ(static_cast<float>(b), 0x1p60f + 0x1p53f);
  const int32_t j = (1 << 30) + (1 << 22) + 1;  // the same for i32 -> bf16 (2^30 scale)
  cast(&j, DType::kI32, &b, DType::kBF16, 1);
  EXPECT_EQ(static_cast<float>(b), 0x1p30f + 0x1p23f);
  const int32_t tie = (1 << 30) + (1 << 22);  // an exact tie goes to even: down
  cast(&tie, DType::kI32, &b, DType::kBF16, 1);
  EXPECT_EQ(static_cast<float>(b), 0x1p30f);
}

TEST(Cast, Fp8SaturateModeClampsOverflowOnly) {
  const float src[] = {1000.0f, -INFINITY, NAN, 1e6f};
  uint8_t e4[4], e4s[4], e5[4], e5s[4];
  cast(src, DType::kF32, e4, DType::kF8E4M3, 4);
  cast(src, DType::kF32, e4s, DType::kF8E4M3, 4, CastMode::kSaturate);
  cast(src, DType::kF32, e5, DType::kF8E5M2, 4);
  cast(src, DType::kF32, e5s, DType::kF8E5M2, 4, CastMode::kSaturate);
  EXPECT_EQ(e4[0], 0x7f);   // NaN: e4m3fn has no Inf
  EXPECT_EQ(e4s[0], 0x7e);  // 448
  EXPECT_EQ(e4s[1], 0xfe);  // -448
  EXPECT_EQ(e4s[2] & 0x7f, 0x7f);
  EXPECT_EQ(e5[3], 0x7c);   // Inf
  EXPECT_EQ(e5s[3], 0x7b);  // 57344
  EXPECT_EQ(e5s[1], 0xfb);
  // f64 -> fp8 honours the mode too (a scalar-only pair).
  const double d = 1000.0;
  uint8_t out = 0;
  cast(&d, DType::kF64, &out, DType::kF8E4M3, 1, CastMode::kSaturate);
  EXPECT_EQ(out, 0x7e);
}

TEST(Cast, BadInput) {
  float f = 0;
  half h;
  expect_error([&] { cast(&f, DType::kF32, &h, DType::kF16, -3); }, ErrorKind::kInvalidArgument,
               {"cast", "-3"});
  expect_error([&] { cast(nullptr, DType::kF32, &h, DType::kF16, 1); }, ErrorKind::kInvalidArgument,
               {"cast", "src", "f32"});
  cast(nullptr, DType::kF32, nullptr, DType::kF16, 0);  // n == 0 touches nothing
}

// ---- fill ----------------------------------------------------------------------------------

TEST(Fill, EveryDtypeConvertsLikeCast) {
  for (int t = 0; t < kNumDTypes; ++t) {
    const auto dt = static_cast<DType>(t);
    for (int64_t n : testing::tail_sizes()) {
      std::vector<unsigned char> buf(static_cast<size_t>(n + 1) * dtype_size(dt), 0xab);
      fill(buf.data(), dt, n, 2.5);
      const double want = dt == DType::kBool ? 1.0 : is_floating(dt) ? 2.5 : 2.0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(decode(buf.data() + i * dtype_size(dt), dt), want) << dt << " n=" << n;
      }
      EXPECT_EQ(buf[static_cast<size_t>(n) * dtype_size(dt)], 0xab) << "wrote past n for " << dt;
    }
  }
}

TEST(Fill, SpecialValues) {
  half h[3];
  fill(h, DType::kF16, 3, NAN);
  EXPECT_EQ(h[2].bits, 0x7e00);
  uint8_t u[2];
  fill(u, DType::kU8, 2, -1.0);
  EXPECT_EQ(u[1], 0);  // float -> int saturates
  int32_t i[2];
  fill(i, DType::kI32, 2, 1e12);
  EXPECT_EQ(i[0], std::numeric_limits<int32_t>::max());
  uint8_t e4[2];
  fill(e4, DType::kF8E4M3, 2, 1e9);
  EXPECT_EQ(e4[1], 0x7f);
  expect_error([&] { fill(h, DType::kF16, -1, 0.0); }, ErrorKind::kInvalidArgument, {"fill", "-1"});
  expect_error([&] { fill(nullptr, DType::kF16, 4, 0.0); }, ErrorKind::kInvalidArgument,
               {"fill", "f16"});
}

}  // namespace
}  // namespace braid::kernels::cpu
