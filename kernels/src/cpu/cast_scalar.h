// Scalar element conversions shared by cast.cc (every dtype pair) and copy.cc (fill).
// Baseline code only: never include from an ISA file (Note [ISA files and the ODR] in
// elementwise_simd.h).
//
// Rules (docs/kernels.md, "Casts"):
//   - to a float type: round to nearest even, once. Sources wider than f32 (f64, i32, i64)
//     reach the 16- and 8-bit formats through f32 rounded to odd, which makes the two steps
//     round like one.
//   - float to integer: truncate toward zero, saturating: NaN -> 0, values beyond the range
//     (Inf included) -> the nearest limit. (Rust's `as`; C++ leaves this undefined.)
//   - integer to integer: two's-complement wrap (C++20 static_cast, as torch).
//   - to bool: x != 0 (NaN -> true).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "braid/core/float_types.h"

namespace braid::kernels::cpu::cast_detail {

template <class T>
inline constexpr bool kIsNarrowFloat =
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float8_e4m3fn> ||
    std::is_same_v<T, float8_e5m2>;

// Rounds to f32 with round-to-odd: truncate, then set the lsb when inexact.
inline float f32_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(d) && static_cast<double>(f) != d) {
    uint32_t b = std::bit_cast<uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) b -= 1;  // toward zero
    f = std::bit_cast<float>(b | 1u);
  }
  return f;
}

inline float f32_round_odd(int64_t x) {
  const bool neg = x < 0;
  const uint64_t u = neg ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  float f;
  if (u < (uint64_t{1} << 24)) {
    f = static_cast<float>(u);
  } else {
    const int shift = 64 - std::countl_zero(u) - 24;
    uint64_t m = u >> shift;
    if ((u & ((uint64_t{1} << shift) - 1)) != 0) m |= 1;
    f = static_cast<float>(m) * std::bit_cast<float>(static_cast<uint32_t>(127 + shift) << 23);
  }
  return neg ? -f : f;
}

// The value as the widest type that holds it exactly (double, float, int64 or bool).
template <class S>
auto widen(S x) {
  if constexpr (kIsNarrowFloat<S>) {
    return static_cast<float>(x);
  } else if constexpr (std::is_same_v<S, bool> || std::is_floating_point_v<S>) {
    return x;
  } else {
    return static_cast<int64_t>(x);
  }
}

template <class D>
D saturate_to_int(double x) {
  using L = std::numeric_limits<D>;
  if (std::isnan(x)) return D{0};
  if (!(x > static_cast<double>(L::min()) - 1.0)) return L::min();
  if (!(x < static_cast<double>(L::max()) + 1.0)) return L::max();
  return static_cast<D>(x);
}

template <class D, bool kSaturate>
D narrow_from_f32(float f) {
  if constexpr (kSaturate && (std::is_same_v<D, float8_e4m3fn> || std::is_same_v<D, float8_e5m2>)) {
    return D::saturate(f);
  } else {
    return D(f);
  }
}

template <class D, bool kSaturate, class S>
D convert(S x) {
  const auto w = widen(x);
  using W = decltype(w);
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return w != W{0};
  } else if constexpr (std::is_integral_v<D>) {
    if constexpr (std::is_floating_point_v<W>) {
      return saturate_to_int<D>(static_cast<double>(w));
    } else {
      return static_cast<D>(w);
    }
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(w);
  } else if constexpr (std::is_same_v<S, double> || std::is_same_v<S, int64_t> ||
                       std::is_same_v<S, int32_t>) {
    return narrow_from_f32<D, kSaturate>(f32_round_odd(w));
  } else {
    return narrow_from_f32<D, kSaturate>(static_cast<float>(w));
  }
}

}  // namespace braid::kernels::cpu::cast_detail
