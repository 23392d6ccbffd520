// Hand-checked conversions of core/float_types.h, independent of Python: each expected bit
// pattern is worked out in the comment beside it from the format's definition. The
// exhaustive comparison with numpy / ml_dtypes lives in tests/golden/ (docs/dtypes.md).
#include "braid/core/float_types.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace braid {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
float f32(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// ---- constexpr: the conversions are usable in constant expressions -----------------------
// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. 1.0 = exponent 15 -> 0x3c00.
static_assert(half(1.0f).bits == 0x3c00);
static_assert(half(-2.0f).bits == 0xc000);  // sign bit, exponent 16
// 2^-24 is the smallest subnormal half (mantissa 1).
static_assert(half(5.9604644775390625e-8f).bits == 0x0001);
static_assert(static_cast<float>(half::from_bits(0x7bff)) == 65504.0f);
// bfloat16 is the top half of a float: 1.0f = 0x3f800000 -> 0x3f80.
static_assert(bfloat16(1.0f).bits == 0x3f80);
static_assert(static_cast<float>(bfloat16::from_bits(0xc040)) == -3.0f);
// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa. 1.0 = exponent 7 -> 0b0'0111'000 = 0x38.
static_assert(float8_e4m3fn(1.0f).bits == 0x38);
static_assert(float8_e4m3fn::saturate(1e9f).bits == 0x7e);
// e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa. 1.0 -> 0b0'01111'00 = 0x3c.
static_assert(float8_e5m2(1.0f).bits == 0x3c);
static_assert(static_cast<float>(float8_e5m2::from_bits(0x7b)) == 57344.0f);

// ---- half --------------------------------------------------------------------------------

TEST(Half, ExactValues) {
  EXPECT_EQ(half(0.0f).bits, 0x0000);
  EXPECT_EQ(half(-0.0f).bits, 0x8000);  // the sign of zero is kept
  EXPECT_EQ(half(1.0f).bits, 0x3c00);
  // 65504 = (2 - 2^-10) * 2^15: exponent 30, mantissa all ones, the largest half.
  EXPECT_EQ(half(65504.0f).bits, 0x7bff);
  // 2^-14 = the smallest normal: exponent field 1, mantissa 0.
  EXPECT_EQ(half(std::ldexp(1.0f, -14)).bits, 0x0400);
  // 2^-24 = the smallest subnormal, 1023 * 2^-24 the largest.
  EXPECT_EQ(half(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(half(std::ldexp(1023.0f, -24)).bits, 0x03ff);
}

TEST(Half, RoundsToNearestEven) {
  // Halves near 1 are 2^-10 apart. 1 + 2^-11 lies halfway between 0x3c00 (even mantissa)
  // and 0x3c01: the tie goes to 0x3c00. 1 + 3 * 2^-11 lies between 0x3c01 and 0x3c02
  // (even): it goes up to 0x3c02.
  EXPECT_EQ(half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(half(1.0f + std::ldexp(3.0f, -11)).bits, 0x3c02);
  // Just above the tie rounds up.
  EXPECT_EQ(half(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)).bits, 0x3c01);
  // 2^-25 is halfway between 0 and the smallest subnormal 2^-24: the tie goes to 0 (even);
  // one f32 ulp above it rounds up to 2^-24.
  EXPECT_EQ(half(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  // 3 * 2^-25 is halfway between subnormals 1 and 2: the tie goes to 2 (even).
  EXPECT_EQ(half(std::ldexp(3.0f, -25)).bits, 0x0002);
  // f32 subnormals are far below half's smallest subnormal: they give (signed) zero.
  EXPECT_EQ(half(f32(0x00000001)).bits, 0x0000);
  EXPECT_EQ(half(f32(0x807fffff)).bits, 0x8000);
}

TEST(Half, OverflowInfAndNaN) {
  // 65520 is halfway between 65504 (mantissa all ones, odd) and 2^16 (which would have
  // exponent 31 = Inf): the tie goes to the even side, Inf. Anything below stays 65504.
  EXPECT_EQ(half(std::nextafter(65520.0f, 0.0f)).bits, 0x7bff);
  EXPECT_EQ(half(65520.0f).bits, 0x7c00);
  EXPECT_EQ(half(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(half(1e10f).bits, 0x7c00);
  EXPECT_EQ(half(kInf).bits, 0x7c00);
  EXPECT_EQ(half(-kInf).bits, 0xfc00);
  // NaN stays NaN (exponent 31, mantissa non-zero), sign kept, payload not promised.
  const half n = half(kNaN);
  EXPECT_EQ(n.bits & 0x7c00, 0x7c00);
  EXPECT_NE(n.bits & 0x03ff, 0);
  EXPECT_EQ(half(-kNaN).bits & 0x8000, 0x8000);
  // A signalling f32 NaN whose payload sits below half's mantissa must not become Inf.
  EXPECT_NE(half(f32(0x7f800001)).bits & 0x03ff, 0);
}

TEST(Half, Decode) {
  EXPECT_EQ(static_cast<float>(half::from_bits(0x3c00)), 1.0f);
  // 0x3555: exponent 13 -> 2^-2, mantissa 0x155 = 341 -> (1 + 341/1024) / 4 = 0.333251953125
  EXPECT_EQ(static_cast<float>(half::from_bits(0x3555)), 0.333251953125f);
  EXPECT_EQ(static_cast<float>(half::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(half::from_bits(0x8000)), 0.0f);
  EXPECT_TRUE(std::signbit(static_cast<float>(half::from_bits(0x8000))));
  EXPECT_EQ(static_cast<float>(half::from_bits(0xfc00)), -kInf);
  EXPECT_TRUE(std::isnan(static_cast<float>(half::from_bits(0x7c01))));
}

// ---- bfloat16 ----------------------------------------------------------------------------

TEST(BFloat16, RoundsToNearestEven) {
  // bf16 keeps the top 16 bits of a float; the low 16 decide the rounding.
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(f32(0x3f807fff)).bits, 0x3f80);  // below half an ulp: down
  EXPECT_EQ(bfloat16(f32(0x3f808000)).bits, 0x3f80);  // tie, 0x3f80 even: stays
  EXPECT_EQ(bfloat16(f32(0x3f818000)).bits, 0x3f82);  // tie, 0x3f81 odd: up to even
  EXPECT_EQ(bfloat16(f32(0x3f808001)).bits, 0x3f81);  // above the tie: up
  EXPECT_EQ(bfloat16(-0.0f).bits, 0x8000);
  // bf16 has f32's exponent range, so f32 subnormals round like any other value:
  // 0x00000001 is below half of bf16's smallest subnormal (0x0001 = 0x00010000) -> 0.
  EXPECT_EQ(bfloat16(f32(0x00000001)).bits, 0x0000);
  EXPECT_EQ(bfloat16(f32(0x00018000)).bits, 0x0002);  // subnormal tie, 0x0001 odd: up
}

TEST(BFloat16, OverflowInfAndNaN) {
  // f32 max = 0x7f7fffff: its low half is above the tie, the carry reaches the exponent
  // and gives Inf (bf16 overflow rounds to Inf, as in IEEE).
  EXPECT_EQ(bfloat16(f32(0x7f7fffff)).bits, 0x7f80);
  EXPECT_EQ(bfloat16(f32(0x7f7f7fff)).bits, 0x7f7f);
  EXPECT_EQ(bfloat16(kInf).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-kInf).bits, 0xff80);
  // 0x7f800001 is a NaN whose top 16 bits alone would read as Inf: it must stay NaN.
  EXPECT_EQ(bfloat16(f32(0x7f800001)).bits & 0x7fff, 0x7fc0);
  EXPECT_EQ(bfloat16(f32(0xffffffff)).bits & 0x8000, 0x8000);
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(kNaN))));
  EXPECT_EQ(static_cast<float>(bfloat16::from_bits(0x4049)), 3.140625f);  // 0x40490000
}

// ---- float8_e4m3fn -----------------------------------------------------------------------

TEST(Float8E4M3FN, ValuesAndRounding) {
  // 2^-9 is the smallest subnormal (exponent field 0, mantissa 1): 2^(1-7) * 1/8.
  EXPECT_EQ(float8_e4m3fn(std::ldexp(1.0f, -9)).bits, 0x01);
  EXPECT_EQ(float8_e4m3fn(std::ldexp(1.0f, -6)).bits, 0x08);  // smallest normal
  // 2^-10 ties between 0 and 2^-9: to 0 (even).
  EXPECT_EQ(float8_e4m3fn(std::ldexp(1.0f, -10)).bits, 0x00);
  // Near 1 the step is 1/8: 1 + 1/16 ties to 1.0 (0x38, even); 1 + 3/16 ties up to 0x3a.
  EXPECT_EQ(float8_e4m3fn(1.0625f).bits, 0x38);
  EXPECT_EQ(float8_e4m3fn(1.1875f).bits, 0x3a);
  EXPECT_EQ(float8_e4m3fn(-1.0f).bits, 0xb8);
  EXPECT_EQ(static_cast<float>(float8_e4m3fn::from_bits(0x3a)), 1.25f);
}

TEST(Float8E4M3FN, OverflowHasNoInf) {
  // 448 = 1.75 * 2^8: exponent field 15, mantissa 110 = 0x7e, the largest finite value;
  // 0x7f (mantissa 111) is NaN, not 480.
  EXPECT_EQ(float8_e4m3fn(448.0f).bits, 0x7e);
  EXPECT_EQ(static_cast<float>(float8_e4m3fn::from_bits(0x7e)), 448.0f);
  // 464 is halfway between 448 (mantissa 110, even) and the would-be 480: ties to 448.
  EXPECT_EQ(float8_e4m3fn(464.0f).bits, 0x7e);
  // Above 464 the value rounds to 480, which does not exist: NaN (ml_dtypes, PyTorch).
  EXPECT_EQ(float8_e4m3fn(std::nextafter(464.0f, 500.0f)).bits, 0x7f);
  EXPECT_EQ(float8_e4m3fn(480.0f).bits, 0x7f);
  EXPECT_EQ(float8_e4m3fn(-480.0f).bits, 0xff);
  EXPECT_EQ(float8_e4m3fn(kInf).bits, 0x7f);  // no Inf: Inf becomes NaN
  EXPECT_EQ(float8_e4m3fn(-kInf).bits, 0xff);
  EXPECT_TRUE(std::isnan(static_cast<float>(float8_e4m3fn::from_bits(0x7f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(float8_e4m3fn::from_bits(0xff))));
}

TEST(Float8E4M3FN, Saturate) {
  // Finite in-range values convert as the default conversion does.
  EXPECT_EQ(float8_e4m3fn::saturate(464.0f).bits, 0x7e);
  EXPECT_EQ(float8_e4m3fn::saturate(1.1875f).bits, 0x3a);
  // Overflow and Inf clamp to +-448.
  EXPECT_EQ(float8_e4m3fn::saturate(480.0f).bits, 0x7e);
  EXPECT_EQ(float8_e4m3fn::saturate(-1e30f).bits, 0xfe);
  EXPECT_EQ(float8_e4m3fn::saturate(kInf).bits, 0x7e);
  EXPECT_EQ(float8_e4m3fn::saturate(-kInf).bits, 0xfe);
  // NaN stays NaN.
  EXPECT_EQ(float8_e4m3fn::saturate(kNaN).bits, 0x7f);
  EXPECT_EQ(float8_e4m3fn::saturate(-kNaN).bits, 0xff);
}

// ---- float8_e5m2 -------------------------------------------------------------------------

TEST(Float8E5M2, ValuesRoundingAndOverflow) {
  EXPECT_EQ(float8_e5m2(std::ldexp(1.0f, -16)).bits, 0x01);  // 2^(1-15) * 1/4
  EXPECT_EQ(float8_e5m2(std::ldexp(1.0f, -17)).bits, 0x00);  // tie between 0 and 2^-16
  // 57344 = 1.75 * 2^15: exponent field 30, mantissa 11 = 0x7b, the largest finite value.
  EXPECT_EQ(float8_e5m2(57344.0f).bits, 0x7b);
  // 61440 is halfway between 57344 (mantissa 11, odd) and 2^16 (exponent 31 = Inf):
  // the tie goes to the even side, Inf, as in IEEE binary16.
  EXPECT_EQ(float8_e5m2(std::nextafter(61440.0f, 0.0f)).bits, 0x7b);
  EXPECT_EQ(float8_e5m2(61440.0f).bits, 0x7c);
  EXPECT_EQ(float8_e5m2(-kInf).bits, 0xfc);
  const uint8_t nan = float8_e5m2(kNaN).bits;
  EXPECT_GT(nan & 0x7f, 0x7c);  // exponent 31 with a non-zero mantissa
  EXPECT_EQ(static_cast<float>(float8_e5m2::from_bits(0x7c)), kInf);
  EXPECT_TRUE(std::isnan(static_cast<float>(float8_e5m2::from_bits(0x7d))));
  // e5m2 is the top byte of a half: both conversions of a representable value agree.
  EXPECT_EQ(float8_e5m2(0.375f).bits, half(0.375f).bits >> 8);
}

TEST(Float8E5M2, Saturate) {
  EXPECT_EQ(float8_e5m2::saturate(61440.0f).bits, 0x7b);
  EXPECT_EQ(float8_e5m2::saturate(-kInf).bits, 0xfb);
  EXPECT_EQ(float8_e5m2::saturate(kInf).bits, 0x7b);
  EXPECT_EQ(float8_e5m2::saturate(1.0f).bits, 0x3c);
  EXPECT_GT(float8_e5m2::saturate(kNaN).bits & 0x7f, 0x7c);
}

// ---- round trip: every non-NaN code decodes to a float that encodes back to itself -------

template <typename T, typename Bits>
void expect_round_trip(int codes) {
  for (int c = 0; c < codes; ++c) {
    const T v = T::from_bits(static_cast<Bits>(c));
    const float f = static_cast<float>(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(T(f).bits, c) << "code 0x" << std::hex << c << " decoded to " << f;
  }
}

TEST(FloatTypes, EveryCodeRoundTrips) {
  expect_round_trip<half, uint16_t>(1 << 16);
  expect_round_trip<bfloat16, uint16_t>(1 << 16);
  expect_round_trip<float8_e4m3fn, uint8_t>(1 << 8);
  expect_round_trip<float8_e5m2, uint8_t>(1 << 8);
}

}  // namespace
}  // namespace braid
