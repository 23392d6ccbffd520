// SPDX-License-Identifier: Apache-2.0
// DType: the element types braid stores and computes in, with the names safetensors uses.
// DType lives in core/ (not tensor/) because kernels/, which sits below tensor/, dispatches
// on it too (docs/layout.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

#include "braid/core/float_types.h"

namespace braid {

// clang-format off
// The dtype table, the one X-macro list braid keeps (STYLE.md):
//   X(enumerator, short name, safetensors name, C++ type, size, is_float)
#define BRAID_FOR_EACH_DTYPE(X)                                    \
  X(kF64, "f64", "F64", double, 8, true)                           \
  X(kF32, "f32", "F32", float, 4, true)                            \
  X(kF16, "f16", "F16", ::braid::half, 2, true)                    \
  X(kBF16, "bf16", "BF16", ::braid::bfloat16, 2, true)             \
  X(kF8E4M3, "f8e4m3", "F8_E4M3", ::braid::float8_e4m3fn, 1, true) \
  X(kF8E5M2, "f8e5m2", "F8_E5M2", ::braid::float8_e5m2, 1, true)   \
  X(kI64, "i64", "I64", int64_t, 8, false)                         \
  X(kI32, "i32", "I32", int32_t, 4, false)                         \
  X(kI16, "i16", "I16", int16_t, 2, false)                         \
  X(kI8, "i8", "I8", int8_t, 1, false)                             \
  X(kU8, "u8", "U8", uint8_t, 1, false)                            \
  X(kBool, "bool", "BOOL", bool, 1, false)
// clang-format on

enum class DType : uint8_t {
#define BRAID_DTYPE_ENUM(e, n, st, T, sz, fl) e,
  BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_ENUM)
#undef BRAID_DTYPE_ENUM
};

inline constexpr int kNumDTypes = 12;

// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
#define BRAID_DTYPE_SIZE(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return sz;
    BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_SIZE)
#undef BRAID_DTYPE_SIZE
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  switch (t) {
#define BRAID_DTYPE_FLOAT(e, n, st, T, sz, fl) \
  case DType::e:                               \
    return fl;
    BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_FLOAT)
#undef BRAID_DTYPE_FLOAT
  }
  return false;
}

// f16, bf16 and the fp8 types: stored narrow, computed in f32.
constexpr bool is_reduced_float(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3 || t == DType::kF8E5M2;
}

// "f32", "bf16", ...
std::string_view dtype_name(DType t);
// "F32", "BF16", "F8_E4M3", ... as in the safetensors header.
std::string_view dtype_safetensors_name(DType t);
// Accepts the short name, the safetensors name, and the torch spelling ("float32",
// "bfloat16", "float8_e4m3fn", "half", "float", ...). nullopt when unknown.
std::optional<DType> dtype_from_name(std::string_view name);
// Like dtype_from_name but throws kInvalidArgument listing the accepted names.
DType parse_dtype(std::string_view name);

std::ostream& operator<<(std::ostream& os, DType t);

// The C++ type of a dtype: CType<DType::kBF16> is braid::bfloat16.
template <DType T>
struct CTypeOf;
#define BRAID_DTYPE_CTYPE(e, n, st, Ty, sz, fl) \
  template <>                                   \
  struct CTypeOf<DType::e> {                    \
    using type = Ty;                            \
  };
BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_CTYPE)
#undef BRAID_DTYPE_CTYPE
template <DType T>
using CType = typename CTypeOf<T>::type;

// The dtype of a C++ type: dtype_of<float>() is DType::kF32.
template <typename T>
constexpr DType dtype_of();
#define BRAID_DTYPE_OF(e, n, st, Ty, sz, fl) \
  template <>                                \
  constexpr DType dtype_of<Ty>() {           \
    return DType::e;                         \
  }
BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_OF)
#undef BRAID_DTYPE_OF

}  // namespace braid
