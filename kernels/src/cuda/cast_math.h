// The element conversions of the cuda table's cast and fill (and the loads / stores of every
// other kernel), written once for the GPU and the host: braid_kernels_cuda_host_test runs this
// very code against kernels::cpu::cast at CpuIsa::kScalar on every special value, so the rules
// of cpu.h ("cast") are proven without a GPU:
//   - to a float type: round to nearest even, once; f64 / i32 / i64 sources reach the 16- and
//     8-bit formats through f32 rounded to odd (two roundings that equal one);
//   - the narrow formats by float_types.h's integer algorithms (not CUDA's __float2half_rn &c.),
//     so NaN keeps the sign and gets float_types.h's quiet pattern on both devices;
//   - float -> integer truncates and saturates (NaN -> 0); integer -> integer wraps; to bool
//     is x != 0 (NaN -> true).
// Where device and host differ (bit reinterpretation, count-leading-zeros) BRAID_DEVICE_PASS
// picks the intrinsic; the arithmetic is the same IEEE operations on both sides.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "braid/core/dtype.h"
#include "braid/core/float_types.h"
#include "braid/kernels/types.h"
#include "hd.h"

#if !BRAID_DEVICE_PASS
#include <bit>
#endif

namespace braid::kernels::cuda::math {

// ---- bit reinterpretation ----------------------------------------------------------------------

BRAID_HD inline uint32_t bits_of(float x) {
#if BRAID_DEVICE_PASS
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
BRAID_HD inline float f32_of(uint32_t u) {
#if BRAID_DEVICE_PASS
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}
BRAID_HD inline uint64_t bits_of(double x) {
#if BRAID_DEVICE_PASS
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<uint64_t>(x);
#endif
}
BRAID_HD inline int clz64(uint64_t u) {  // u != 0
#if BRAID_DEVICE_PASS
  return __clzll(static_cast<long long>(u));
#else
  return std::countl_zero(u);
#endif
}

BRAID_HD inline bool is_nan(float x) {
  return (bits_of(x) & 0x7fffffffu) > 0x7f800000u;
}
BRAID_HD inline bool is_nan(double x) {
  return (bits_of(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
BRAID_HD inline bool is_finite(double x) {
  return (bits_of(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

// ---- the narrow float formats (float_types.h, restated for device code)
// --------------------------

BRAID_HD inline uint16_t f32_to_f16(float value) {
  uint32_t x = bits_of(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x47800000u) {  // |x| >= 2^16: Inf, NaN or overflow
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (x < 0x38800000u) {  // subnormal or zero half: 0.5f's ulp is the half subnormal step
    const float magic = 0.5f;
    const uint32_t r = bits_of(f32_of(x) + magic) - bits_of(magic);
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (x >> 13));
}

BRAID_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_of(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // exact
    return sign ? -v : v;
  }
  return f32_of(sign | ((exp + 112) << 23) | (mant << 13));
}

BRAID_HD inline uint16_t f32_to_bf16(float value) {
  const uint32_t x = bits_of(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

BRAID_HD inline float bf16_to_f32(uint16_t b) {
  return f32_of(static_cast<uint32_t>(b) << 16);
}

// F is fp::E4M3FN or fp::E5M2 (their constants are constexpr scalars, usable on the device).
template <typename F>
BRAID_HD inline uint8_t f32_to_fp8(float value, bool saturate) {
  uint32_t x = bits_of(value);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | F::nan_code);
  const uint8_t over = saturate ? F::max_code : F::inf_code;
  constexpr int emax = (F::max_code >> F::mant_bits) - F::bias;
  if (x >= static_cast<uint32_t>(127 + emax + 1) << 23) return static_cast<uint8_t>(sign | over);
  constexpr uint32_t min_normal = static_cast<uint32_t>(127 + 1 - F::bias) << 23;
  uint32_t code;
  if (x < min_normal) {
    constexpr uint32_t magic_bits = static_cast<uint32_t>(127 + 1 - F::bias - F::mant_bits + 23)
                                    << 23;
    code = bits_of(f32_of(x) + f32_of(magic_bits)) - magic_bits;
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
BRAID_HD inline float fp8_to_f32(uint8_t v) {
  const bool neg = (v & 0x80u) != 0;
  const uint32_t exp = (v >> F::mant_bits) & ((1u << F::exp_bits) - 1u);
  const uint32_t mant = v & ((1u << F::mant_bits) - 1u);
  const uint32_t sign = neg ? 0x80000000u : 0u;
  if ((v & 0x7fu) > F::max_code) {
    if (F::has_inf && mant == 0) return f32_of(sign | 0x7f800000u);
    return f32_of(sign | 0x7fc00000u);
  }
  if (exp == 0) {
    const float step = f32_of(static_cast<uint32_t>(127 + 1 - F::bias - F::mant_bits) << 23);
    const float m = static_cast<float>(mant) * step;
    return neg ? -m : m;
  }
  return f32_of(sign | ((exp - F::bias + 127) << 23) | (mant << (23 - F::mant_bits)));
}

// ---- rounding to odd (cast_scalar.h) ----------------------------------------------------------

// d rounded to f32 toward zero, with the last bit set when inexact.
BRAID_HD inline float f32_round_odd(double d) {
  float f = static_cast<float>(d);
  if (is_finite(d) && static_cast<double>(f) != d) {
    uint32_t b = bits_of(f);
    if (fabs(static_cast<double>(f)) > fabs(d)) b -= 1;  // toward zero
    f = f32_of(b | 1u);
  }
  return f;
}

BRAID_HD inline float f32_round_odd(int64_t x) {
  const bool neg = x < 0;
  const uint64_t u = neg ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  float f;
  if (u < (uint64_t{1} << 24)) {
    f = static_cast<float>(u);
  } else {
    const int shift = 64 - clz64(u) - 24;
    uint64_t m = u >> shift;
    if ((u & ((uint64_t{1} << shift) - 1)) != 0) m |= 1;
    f = static_cast<float>(m) * f32_of(static_cast<uint32_t>(127 + shift) << 23);
  }
  return neg ? -f : f;
}

// ---- the dtype table as device-usable traits
// ------------------------------------------------------

// How a dtype's value is widened before a conversion (cast_scalar.h's widen()).
enum class Kind : uint8_t { kF64, kF32, kNarrow, kInt, kBool };

template <DType D>
struct Elem;

template <>
struct Elem<DType::kF64> {
  using Bits = double;
  static constexpr Kind kind = Kind::kF64;
};
template <>
struct Elem<DType::kF32> {
  using Bits = float;
  static constexpr Kind kind = Kind::kF32;
};
template <>
struct Elem<DType::kF16> {
  using Bits = uint16_t;
  static constexpr Kind kind = Kind::kNarrow;
  BRAID_HD static float to_f32(Bits b) { return f16_to_f32(b); }
  BRAID_HD static Bits from_f32(float f, bool) { return f32_to_f16(f); }
};
template <>
struct Elem<DType::kBF16> {
  using Bits = uint16_t;
  static constexpr Kind kind = Kind::kNarrow;
  BRAID_HD static float to_f32(Bits b) { return bf16_to_f32(b); }
  BRAID_HD static Bits from_f32(float f, bool) { return f32_to_bf16(f); }
};
template <>
struct Elem<DType::kF8E4M3> {
  using Bits = uint8_t;
  static constexpr Kind kind = Kind::kNarrow;
  BRAID_HD static float to_f32(Bits b) { return fp8_to_f32<fp::E4M3FN>(b); }
  BRAID_HD static Bits from_f32(float f, bool sat) { return f32_to_fp8<fp::E4M3FN>(f, sat); }
};
template <>
struct Elem<DType::kF8E5M2> {
  using Bits = uint8_t;
  static constexpr Kind kind = Kind::kNarrow;
  BRAID_HD static float to_f32(Bits b) { return fp8_to_f32<fp::E5M2>(b); }
  BRAID_HD static Bits from_f32(float f, bool sat) { return f32_to_fp8<fp::E5M2>(f, sat); }
};

// Integers carry their range as constants (std::numeric_limits is host-only in CUDA).
template <typename T, int64_t kLo, int64_t kHi>
struct IntElem {
  using Bits = T;
  static constexpr Kind kind = Kind::kInt;
  static constexpr int64_t lo = kLo, hi = kHi;
};
template <>
struct Elem<DType::kI64> : IntElem<int64_t, INT64_MIN, INT64_MAX> {};
template <>
struct Elem<DType::kI32> : IntElem<int32_t, INT32_MIN, INT32_MAX> {};
template <>
struct Elem<DType::kI16> : IntElem<int16_t, INT16_MIN, INT16_MAX> {};
template <>
struct Elem<DType::kI8> : IntElem<int8_t, INT8_MIN, INT8_MAX> {};
template <>
struct Elem<DType::kU8> : IntElem<uint8_t, 0, UINT8_MAX> {};
template <>
struct Elem<DType::kBool> {
  using Bits = uint8_t;  // one byte, 0 or 1 (any non-zero byte reads as true)
  static constexpr Kind kind = Kind::kBool;
};

template <DType D>
using Bits = typename Elem<D>::Bits;

// The value as the widest type that holds it exactly: double, float, int64_t or bool.
template <DType S>
BRAID_HD inline auto widen(Bits<S> x) {
  constexpr Kind k = Elem<S>::kind;
  if constexpr (k == Kind::kNarrow) {
    return Elem<S>::to_f32(x);
  } else if constexpr (k == Kind::kBool) {
    return x != 0;
  } else if constexpr (k == Kind::kInt) {
    return static_cast<int64_t>(x);
  } else {
    return x;
  }
}

// Float -> integer: truncate toward zero, NaN -> 0, beyond the range (Inf too) -> the limit.
template <DType D>
BRAID_HD inline Bits<D> saturate_to_int(double x) {
  using T = Bits<D>;
  if (is_nan(x)) return T{0};
  if (!(x > static_cast<double>(Elem<D>::lo) - 1.0)) return static_cast<T>(Elem<D>::lo);
  if (!(x < static_cast<double>(Elem<D>::hi) + 1.0)) return static_cast<T>(Elem<D>::hi);
  return static_cast<T>(x);
}

// One element of cast(src S -> dst D); kSaturate only changes fp8 targets.
template <DType D, DType S, bool kSaturate>
BRAID_HD inline Bits<D> convert(Bits<S> x) {
  constexpr Kind kd = Elem<D>::kind;
  if constexpr (D == S) {
    return x;
  } else {
    const auto w = widen<S>(x);
    using W = std::remove_const_t<decltype(w)>;
    if constexpr (kd == Kind::kBool) {
      return static_cast<uint8_t>(w != W(0) ? 1 : 0);
    } else if constexpr (kd == Kind::kInt) {
      if constexpr (std::is_floating_point_v<W>) {
        return saturate_to_int<D>(static_cast<double>(w));
      } else {
        return static_cast<Bits<D>>(w);  // two's-complement wrap (C++20)
      }
    } else if constexpr (kd == Kind::kF64 || kd == Kind::kF32) {
      return static_cast<Bits<D>>(w);
    } else if constexpr (S == DType::kF64 || S == DType::kI64 || S == DType::kI32) {
      return Elem<D>::from_f32(f32_round_odd(w), kSaturate);
    } else {
      return Elem<D>::from_f32(static_cast<float>(w), kSaturate);
    }
  }
}

// Loads and stores of the computing kernels: float dtypes as their compute type (f32, or f64
// for f64), rounded to nearest even once on store.
template <DType D>
using Compute = std::conditional_t<D == DType::kF64, double, float>;

template <DType D>
BRAID_HD inline Compute<D> load(const Bits<D>* p, int64_t i) {
  if constexpr (Elem<D>::kind == Kind::kNarrow) {
    return Elem<D>::to_f32(p[i]);
  } else {
    return p[i];
  }
}
template <DType D>
BRAID_HD inline void store(Bits<D>* p, int64_t i, Compute<D> v) {
  if constexpr (Elem<D>::kind == Kind::kNarrow) {
    p[i] = Elem<D>::from_f32(v, false);
  } else {
    p[i] = v;
  }
}

// A double result rounded once to D: f16 / bf16 through f32 rounded to odd (unary()'s store).
template <DType D>
BRAID_HD inline Bits<D> from_double(double r) {
  if constexpr (Elem<D>::kind == Kind::kNarrow) {
    return Elem<D>::from_f32(f32_round_odd(r), false);
  } else {
    return static_cast<Bits<D>>(r);
  }
}

}  // namespace braid::kernels::cuda::math
