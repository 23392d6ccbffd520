// The SIMD cast kernels, written once over a vector-traits type V and instantiated by
// cast_avx2.cc / cast_avx512.cc / cast_avx512bf16.cc. Internal linkage throughout
// (Note [ISA files and the ODR] in elementwise_simd.h).
#pragma once

#include "cast_kernels.h"
#include "elementwise_simd.h"

namespace braid::kernels::cpu {
namespace {

template <class V, class S, class D>
void cast_vec(const void* src, void* dst, int64_t n) {
  map_tail<V>(static_cast<const S*>(src), static_cast<D*>(dst), n,
              [](const S* in, D* out) { store_f32<V>(out, load_f32<V>(in)); });
}

template <class V, class Fmt, bool kSaturate>
void cast_f32_to_fp8(const void* src, void* dst, int64_t n) {
  map_tail<V>(
      static_cast<const float*>(src), static_cast<uint8_t*>(dst), n,
      [](const float* in, uint8_t* out) { store_fp8<V, Fmt, kSaturate>(out, V::load(in)); });
}

template <class V>
void fill_cast_table_for(CastTable& t) {
  t.fn[kCastF32ToF16] = cast_vec<V, float, half>;
  t.fn[kCastF16ToF32] = cast_vec<V, half, float>;
  t.fn[kCastF32ToBF16] = cast_vec<V, float, bfloat16>;
  t.fn[kCastBF16ToF32] = cast_vec<V, bfloat16, float>;
  t.fn[kCastF32ToE4M3] = cast_f32_to_fp8<V, fp::E4M3FN, false>;
  t.fn[kCastF32ToE4M3Sat] = cast_f32_to_fp8<V, fp::E4M3FN, true>;
  t.fn[kCastE4M3ToF32] = cast_vec<V, float8_e4m3fn, float>;
  t.fn[kCastF32ToE5M2] = cast_f32_to_fp8<V, fp::E5M2, false>;
  t.fn[kCastF32ToE5M2Sat] = cast_f32_to_fp8<V, fp::E5M2, true>;
  t.fn[kCastE5M2ToF32] = cast_vec<V, float8_e5m2, float>;
  t.fn[kCastF16ToBF16] = cast_vec<V, half, bfloat16>;
  t.fn[kCastBF16ToF16] = cast_vec<V, bfloat16, half>;
}

}  // namespace
}  // namespace braid::kernels::cpu
