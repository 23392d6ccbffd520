// cast(): conversions between every pair of the 12 dtypes. Pairs among f32, f16, bf16 and
// the fp8 formats have SIMD paths (cast_simd.h) chosen per call; every other pair runs the
// scalar loop of cast_scalar.h, which is also the reference the SIMD paths are tested against.
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "cast_kernels.h"
#include "cast_scalar.h"
#include "isa_dispatch.h"

namespace braid::kernels::cpu {
namespace {

template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<C++ type of dt>{}).
template <class Fn>
decltype(auto) visit_dtype(DType dt, Fn&& fn) {
  switch (dt) {
#define BRAID_VISIT_CASE(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return fn(TypeTag<T>{});
    BRAID_FOR_EACH_DTYPE(BRAID_VISIT_CASE)
#undef BRAID_VISIT_CASE
  }
  BRAID_FAIL(kInvalidArgument, "cast: dtype value ", static_cast<int>(dt), " is not a DType");
}

template <class S, class D, bool kSaturate>
void cast_loop(const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const S*>(src);
  auto* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = cast_detail::convert<D, kSaturate>(s[i]);
}

CastFn scalar_cast_fn(DType src, DType dst, CastMode mode) {
  return visit_dtype(src, [&](auto s) {
    return visit_dtype(dst, [&](auto d) -> CastFn {
      using S = typename decltype(s)::type;
      using D = typename decltype(d)::type;
      if (mode == CastMode::kSaturate) return cast_loop<S, D, true>;
      return cast_loop<S, D, false>;
    });
  });
}

int hot_cast_index(DType src, DType dst, CastMode mode) {
  const bool sat = mode == CastMode::kSaturate;
  if (src == DType::kF32) {
    switch (dst) {
      case DType::kF16:
        return kCastF32ToF16;
      case DType::kBF16:
        return kCastF32ToBF16;
      case DType::kF8E4M3:
        return sat ? kCastF32ToE4M3Sat : kCastF32ToE4M3;
      case DType::kF8E5M2:
        return sat ? kCastF32ToE5M2Sat : kCastF32ToE5M2;
      default:
        return -1;
    }
  }
  if (dst == DType::kF32) {
    switch (src) {
      case DType::kF16:
        return kCastF16ToF32;
      case DType::kBF16:
        return kCastBF16ToF32;
      case DType::kF8E4M3:
        return kCastE4M3ToF32;
      case DType::kF8E5M2:
        return kCastE5M2ToF32;
      default:
        return -1;
    }
  }
  if (src == DType::kF16 && dst == DType::kBF16) return kCastF16ToBF16;
  if (src == DType::kBF16 && dst == DType::kF16) return kCastBF16ToF16;
  return -1;
}

// One complete table per level: each starts from the next narrower one.
struct CastTables {
  CastTable scalar, avx2, avx512, avx512bf16;
  IsaTable<const CastTable*> pick;
  CastTables() {
    scalar::fill_cast_table(scalar);
    avx2 = scalar;
    avx2::fill_cast_table(avx2);
    avx512 = avx2;
    avx512::fill_cast_table(avx512);
    avx512bf16 = avx512;
    avx512bf16::fill_cast_table(avx512bf16);
    pick = {&scalar, &avx2, &avx512, &avx512bf16};
  }
};

const CastTables& cast_tables() {
  static const CastTables tables;
  return tables;
}

}  // namespace

namespace scalar {
void fill_cast_table(CastTable& t) {
  t.fn[kCastF32ToF16] = cast_loop<float, half, false>;
  t.fn[kCastF16ToF32] = cast_loop<half, float, false>;
  t.fn[kCastF32ToBF16] = cast_loop<float, bfloat16, false>;
  t.fn[kCastBF16ToF32] = cast_loop<bfloat16, float, false>;
  t.fn[kCastF32ToE4M3] = cast_loop<float, float8_e4m3fn, false>;
  t.fn[kCastF32ToE4M3Sat] = cast_loop<float, float8_e4m3fn, true>;
  t.fn[kCastE4M3ToF32] = cast_loop<float8_e4m3fn, float, false>;
  t.fn[kCastF32ToE5M2] = cast_loop<float, float8_e5m2, false>;
  t.fn[kCastF32ToE5M2Sat] = cast_loop<float, float8_e5m2, true>;
  t.fn[kCastE5M2ToF32] = cast_loop<float8_e5m2, float, false>;
  t.fn[kCastF16ToBF16] = cast_loop<half, bfloat16, false>;
  t.fn[kCastBF16ToF16] = cast_loop<bfloat16, half, false>;
}
}  // namespace scalar

CastFn hot_cast_fn(HotCast which) {
  return cast_tables().pick.get()->fn[which];
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, CastMode mode) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "cast: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(src != nullptr && dst != nullptr, kInvalidArgument, "cast: ", n, " elements from ",
              src_dtype, " to ", dst_dtype, " with a null ", src == nullptr ? "src" : "dst",
              " pointer");
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  const int hot = hot_cast_index(src_dtype, dst_dtype, mode);
  if (hot >= 0) {
    cast_tables().pick.get()->fn[hot](src, dst, n);
    return;
  }
  scalar_cast_fn(src_dtype, dst_dtype, mode)(src, dst, n);
}

}  // namespace braid::kernels::cpu
