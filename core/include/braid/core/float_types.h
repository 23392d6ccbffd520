// SPDX-License-Identifier: Apache-2.0
// Host-side low-precision float types: half (IEEE binary16), bfloat16, and the OCP FP8
// formats float8_e4m3fn and float8_e5m2. Each is a 1- or 2-byte value with the exact bit
// layout of its format; conversions from float round to nearest, ties to even, and follow
// IEEE / OCP FP8 rules for NaN, Inf and subnormals (docs/dtypes.md):
//   - NaN in gives a quiet NaN out (payloads are not kept; the sign is).
//   - half, bfloat16, e5m2: overflow rounds to Inf. e4m3fn has no Inf: overflow and Inf
//     give NaN, as in ml_dtypes and PyTorch.
//   - float8_*::saturate (OCP "saturation mode", as NVIDIA's satfinite) clamps
//     overflow and Inf to the largest finite value of the sign; NaN stays NaN.
// These functions are the scalar reference every SIMD cast kernel is tested against, and
// tests/golden/ checks them bit for bit against numpy and ml_dtypes on ~9 million cases.
#pragma once

#include <bit>
#include <cstdint>

namespace braid {
namespace fp {

constexpr uint32_t f32_bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
constexpr float f32_from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

// ---- binary16 ----------------------------------------------------------------------------

constexpr uint16_t f32_to_f16_bits(float value) {
  uint32_t x = f32_bits(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x47800000u) {  // |x| >= 2^16: Inf, NaN or overflow
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (x < 0x38800000u) {  // below 2^-14: a subnormal or zero half
    // Adding 0.5f (whose ulp is 2^-24, the half subnormal step) lets the FPU round for us.
    const float magic = 0.5f;
    const uint32_t r = f32_bits(f32_from_bits(x) + magic) - f32_bits(magic);
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (x >> 13));  // may round up to 0x7c00 (Inf): correct
}

constexpr float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    // subnormal or zero: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// ---- bfloat16 ----------------------------------------------------------------------------

constexpr uint16_t f32_to_bf16_bits(float value) {
  const uint32_t x = f32_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

constexpr float bf16_bits_to_f32(uint16_t b) {
  return f32_from_bits(static_cast<uint32_t>(b) << 16);
}

// ---- FP8 (OCP) ---------------------------------------------------------------------------

// A small float format with kExp exponent bits, kMant mantissa bits and kBias.
// kHasInf: e5m2 has IEEE-style Inf/NaN; e4m3fn ("finite, NaN") has no Inf and one NaN
// mantissa (all ones) per sign.
template <int kExp, int kMant, int kBias, bool kHasInf>
struct Fp8Format {
  static constexpr int exp_bits = kExp;
  static constexpr int mant_bits = kMant;
  static constexpr int bias = kBias;
  static constexpr bool has_inf = kHasInf;
  // largest finite code (without sign)
  static constexpr uint8_t max_code =
      kHasInf ? uint8_t((((1 << kExp) - 2) << kMant) | ((1 << kMant) - 1))
              : uint8_t(((1 << (kExp + kMant)) - 1) - 1);
  static constexpr uint8_t nan_code =
      kHasInf ? uint8_t((((1 << kExp) - 1) << kMant) | (1 << (kMant - 1)))
              : uint8_t((1 << (kExp + kMant)) - 1);
  static constexpr uint8_t inf_code = kHasInf ? uint8_t(((1 << kExp) - 1) << kMant) : nan_code;
};

using E4M3FN = Fp8Format<4, 3, 7, false>;
using E5M2 = Fp8Format<5, 2, 15, true>;

enum class Overflow : uint8_t { kInfOrNaN, kSaturate };

template <typename F>
constexpr uint8_t f32_to_fp8_bits(float value, Overflow overflow) {
  uint32_t x = f32_bits(value);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | F::nan_code);
  const uint8_t over = overflow == Overflow::kSaturate ? F::max_code : F::inf_code;
  // largest exponent of a finite value, unbiased
  constexpr int emax = (F::max_code >> F::mant_bits) - F::bias;
  if (x >= static_cast<uint32_t>(127 + emax + 1) << 23) return static_cast<uint8_t>(sign | over);
  constexpr uint32_t min_normal = static_cast<uint32_t>(127 + 1 - F::bias) << 23;
  uint32_t code;
  if (x < min_normal) {
    // subnormal: a float whose ulp is the fp8 subnormal step rounds for us
    constexpr uint32_t magic_bits = static_cast<uint32_t>(127 + 1 - F::bias - F::mant_bits + 23)
                                    << 23;
    const float magic = f32_from_bits(magic_bits);
    code = f32_bits(f32_from_bits(x) + magic) - magic_bits;
  } else {
    constexpr int shift = 23 - F::mant_bits;
    const uint32_t odd = (x >> shift) & 1u;
    x += (static_cast<uint32_t>(F::bias - 127) << 23) + ((1u << (shift - 1)) - 1u) + odd;
    code = x >> shift;
  }
  if (code > F::max_code) return static_cast<uint8_t>(sign | over);
  return static_cast<uint8_t>(sign | code);
}

template <typename F>
constexpr float fp8_bits_to_f32(uint8_t v) {
  const bool neg = (v & 0x80u) != 0;
  const uint32_t exp = (v >> F::mant_bits) & ((1u << F::exp_bits) - 1u);
  const uint32_t mant = v & ((1u << F::mant_bits) - 1u);
  const uint32_t sign = neg ? 0x80000000u : 0u;
  if ((v & 0x7fu) > F::max_code) {
    if (F::has_inf && mant == 0) return f32_from_bits(sign | 0x7f800000u);
    return f32_from_bits(sign | 0x7fc00000u);
  }
  if (exp == 0) {
    // mant * 2^(1 - bias - mant_bits), exact in float
    const float step = f32_from_bits(static_cast<uint32_t>(127 + 1 - F::bias - F::mant_bits) << 23);
    const float m = static_cast<float>(mant) * step;
    return neg ? -m : m;
  }
  return f32_from_bits(sign | ((exp - F::bias + 127) << 23) | (mant << (23 - F::mant_bits)));
}

}  // namespace fp

// Tag for constructing from raw bits: half::from_bits(0x3c00).
struct half {
  uint16_t bits = 0;
  constexpr half() = default;
  constexpr explicit half(float f) : bits(fp::f32_to_f16_bits(f)) {}
  static constexpr half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  constexpr explicit operator float() const { return fp::f16_bits_to_f32(bits); }
};

struct bfloat16 {
  uint16_t bits = 0;
  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float f) : bits(fp::f32_to_bf16_bits(f)) {}
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  constexpr explicit operator float() const { return fp::bf16_bits_to_f32(bits); }
};

struct float8_e4m3fn {
  uint8_t bits = 0;
  constexpr float8_e4m3fn() = default;
  constexpr explicit float8_e4m3fn(float f)
      : bits(fp::f32_to_fp8_bits<fp::E4M3FN>(f, fp::Overflow::kInfOrNaN)) {}
  static constexpr float8_e4m3fn from_bits(uint8_t b) {
    float8_e4m3fn h;
    h.bits = b;
    return h;
  }
  static constexpr float8_e4m3fn saturate(float f) {
    return from_bits(fp::f32_to_fp8_bits<fp::E4M3FN>(f, fp::Overflow::kSaturate));
  }
  constexpr explicit operator float() const { return fp::fp8_bits_to_f32<fp::E4M3FN>(bits); }
};

struct float8_e5m2 {
  uint8_t bits = 0;
  constexpr float8_e5m2() = default;
  constexpr explicit float8_e5m2(float f)
      : bits(fp::f32_to_fp8_bits<fp::E5M2>(f, fp::Overflow::kInfOrNaN)) {}
  static constexpr float8_e5m2 from_bits(uint8_t b) {
    float8_e5m2 h;
    h.bits = b;
    return h;
  }
  static constexpr float8_e5m2 saturate(float f) {
    return from_bits(fp::f32_to_fp8_bits<fp::E5M2>(f, fp::Overflow::kSaturate));
  }
  constexpr explicit operator float() const { return fp::fp8_bits_to_f32<fp::E5M2>(bits); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1);
static_assert(fp::E4M3FN::max_code == 0x7e && fp::E4M3FN::nan_code == 0x7f);
static_assert(fp::E5M2::max_code == 0x7b && fp::E5M2::inf_code == 0x7c &&
              fp::E5M2::nan_code == 0x7e);

}  // namespace braid
