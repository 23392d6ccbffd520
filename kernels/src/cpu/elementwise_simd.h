// Elementwise building blocks written once against a vector-traits type V (Avx2 in
// elementwise_vec_avx2.h, Avx512 in elementwise_vec_avx512.h) and instantiated by each ISA
// file: exact conversions between f32 and the narrow float formats, and loops with tails.
//
// Note [ISA files and the ODR]
// A function compiled with -mavx512f may contain AVX-512 instructions even when its source
// is ordinary C++. If an inline function or template instantiation with external linkage is
// emitted both by an ISA file and by a baseline file, the linker keeps one copy, possibly
// the AVX-512 one, and the "scalar" path then faults on an older CPU. So everything in these
// internal headers sits in an anonymous namespace, ISA files call no inline function of a
// shared header (float_types.h, error.h, std containers), and they never throw: argument
// checks live in the baseline entry points.
//
// Note [f16 NaN]
// float_types.h turns an f32 NaN into the f16 quiet NaN 0x7e00 with the sign kept, and
// widens an f16 NaN by keeping its payload (mant << 13, not quieted). vcvtps2ph keeps the top
// payload bits and vcvtph2ps quiets signalling NaNs, so both paths patch NaN lanes to the
// reference bits; the patch is skipped when a vector holds no NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "braid/core/float_types.h"

namespace braid::kernels::cpu {
namespace {

// ---- loads to f32 -----------------------------------------------------------------------

template <class V>
typename V::F load_f32(const float* p) {
  return V::load(p);
}

template <class V>
typename V::F load_f32(const half* p) {
  typename V::F f = V::cvt_f16_to_f32(p);
  const typename V::I h = V::load_u16(p);
  const typename V::M nan = V::igt(V::iand(h, V::iset1(0x7fff)), V::iset1(0x7c00));
  if (V::any(nan)) [[unlikely]] {
    const typename V::I sign = V::template shl<16>(V::iand(h, V::iset1(0x8000)));
    const typename V::I mant = V::template shl<13>(V::iand(h, V::iset1(0x3ff)));
    const typename V::I b = V::ior(V::ior(sign, mant), V::iset1(0x7f800000));
    f = V::select(nan, V::from_bits(b), f);
  }
  return f;
}

template <class V>
typename V::F load_f32(const bfloat16* p) {
  return V::from_bits(V::template shl<16>(V::load_u16(p)));
}

// FP8 -> f32 as fp::fp8_bits_to_f32: normal codes by moving the fields, subnormals as
// mant * step in float (no denormal f32 arithmetic, so MXCSR.DAZ cannot change the result).
template <class V, class Fmt>
typename V::F load_fp8(const void* p) {
  using I = typename V::I;
  constexpr int kM = Fmt::mant_bits;
  const I v = V::load_u8(p);
  const I sign = V::template shl<24>(V::iand(v, V::iset1(0x80)));
  const I mag = V::iand(v, V::iset1(0x7f));
  const I mant = V::iand(mag, V::iset1((1 << kM) - 1));
  const I normal = V::iadd(V::template shl<23 - kM>(mag), V::iset1((127 - Fmt::bias) << 23));
  const float step_f = std::bit_cast<float>(uint32_t(127 + 1 - Fmt::bias - kM) << 23);
  const I sub = V::bits(V::mul(V::cvt(mant), V::set1(step_f)));
  I r = V::iselect(V::igt(V::iset1((1 << kM)), mag), sub, normal);  // exponent field 0
  const typename V::M special = V::igt(mag, V::iset1(Fmt::max_code));
  if (V::any(special)) [[unlikely]] {
    I s = V::iset1(0x7fc00000);
    if constexpr (Fmt::has_inf) {
      s = V::iselect(V::ieq(mant, V::iset1(0)), V::iset1(0x7f800000), s);
    }
    r = V::iselect(special, s, r);
  }
  return V::from_bits(V::ior(r, sign));
}

template <class V>
typename V::F load_f32(const float8_e4m3fn* p) {
  return load_fp8<V, fp::E4M3FN>(p);
}
template <class V>
typename V::F load_f32(const float8_e5m2* p) {
  return load_fp8<V, fp::E5M2>(p);
}

// ---- stores from f32, rounding to nearest even -------------------------------------------

template <class V>
void store_f32(float* p, typename V::F v) {
  V::store(p, v);
}

template <class V>
void store_f32(half* p, typename V::F v) {
  V::cvt_f32_to_f16(p, v);
}

// The integer form of fp::f32_to_bf16_bits: add 0x7fff plus the kept lsb, NaN -> quiet.
template <class V>
typename V::I f32_to_bf16_lanes(typename V::F v) {
  using I = typename V::I;
  const I x = V::bits(v);
  const I odd = V::iand(V::template shr<16>(x), V::iset1(1));
  const I rounded = V::template shr<16>(V::iadd(x, V::iadd(V::iset1(0x7fff), odd)));
  const typename V::M nan = V::igt(V::iand(x, V::iset1(0x7fffffff)), V::iset1(0x7f800000));
  return V::iselect(nan, V::ior(V::template shr<16>(x), V::iset1(0x40)), rounded);
}

template <class V>
void store_f32(bfloat16* p, typename V::F v) {
  V::store_u16(p, f32_to_bf16_lanes<V>(v));
}

// fp::f32_to_fp8_bits, lane by lane, with the same branches turned into selects.
template <class V, class Fmt, bool kSaturate>
void store_fp8(void* p, typename V::F v) {
  using I = typename V::I;
  using M = typename V::M;
  constexpr int kShift = 23 - Fmt::mant_bits;
  constexpr int kEmax = (Fmt::max_code >> Fmt::mant_bits) - Fmt::bias;
  constexpr int32_t kMinNormal = (127 + 1 - Fmt::bias) << 23;
  constexpr int32_t kMagicBits = (127 + 1 - Fmt::bias - Fmt::mant_bits + 23) << 23;
  const I over = V::iset1(kSaturate ? Fmt::max_code : Fmt::inf_code);
  const I x = V::bits(v);
  const I sign = V::iand(V::template shr<24>(x), V::iset1(0x80));
  const I a = V::iand(x, V::iset1(0x7fffffff));
  const M sub = V::igt(V::iset1(kMinNormal), a);
  const I sub_code = V::isub(V::bits(V::add(V::from_bits(a), V::from_bits(V::iset1(kMagicBits)))),
                             V::iset1(kMagicBits));
  const I odd = V::iand(V::template shr<kShift>(a), V::iset1(1));
  const I bias = V::iset1(static_cast<int32_t>(static_cast<uint32_t>(Fmt::bias - 127) << 23) +
                          ((1 << (kShift - 1)) - 1));
  const I norm_code = V::template shr<kShift>(V::iadd(V::iadd(a, bias), odd));
  I code = V::iselect(sub, sub_code, norm_code);
  code = V::iselect(V::igt(code, V::iset1(Fmt::max_code)), over, code);
  // |x| >= 2^(emax+1): covers Inf and the values whose normal-path code would wrap
  code = V::iselect(V::igt(a, V::iset1(((127 + kEmax + 1) << 23) - 1)), over, code);
  code = V::iselect(V::igt(a, V::iset1(0x7f800000)), V::iset1(Fmt::nan_code), code);
  V::store_u8(p, V::ior(code, sign));
}

// ---- loops --------------------------------------------------------------------------------

// Runs body(i) for each full vector, then once more on stack copies of the tail so every
// element goes through the same vector code (identical bits for any n).
template <class V, class In, class Out, class Body>
void map_tail(const In* in, Out* out, int64_t n, Body&& body) {
  int64_t i = 0;
  for (; i + V::kW <= n; i += V::kW) body(in + i, out + i);
  const int64_t rest = n - i;
  if (rest == 0) return;
  In in_buf[V::kW];
  Out out_buf[V::kW];
  std::memset(static_cast<void*>(in_buf), 0, sizeof(in_buf));
  std::memcpy(static_cast<void*>(in_buf), in + i, static_cast<size_t>(rest) * sizeof(In));
  body(static_cast<const In*>(in_buf), static_cast<Out*>(out_buf));
  std::memcpy(static_cast<void*>(out + i), out_buf, static_cast<size_t>(rest) * sizeof(Out));
}

}  // namespace
}  // namespace braid::kernels::cpu
