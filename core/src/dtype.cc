// DType names: short, safetensors and torch spellings.
#include "braid/core/dtype.h"

#include <array>
#include <string>

#include "braid/core/error.h"

namespace braid {

std::string_view dtype_name(DType t) {
  switch (t) {
#define BRAID_DTYPE_NAME(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return n;
    BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_NAME)
#undef BRAID_DTYPE_NAME
  }
  return "?";
}

std::string_view dtype_safetensors_name(DType t) {
  switch (t) {
#define BRAID_DTYPE_ST(e, n, st, T, sz, fl) \
  case DType::e:                            \
    return st;
    BRAID_FOR_EACH_DTYPE(BRAID_DTYPE_ST)
#undef BRAID_DTYPE_ST
  }
  return "?";
}

namespace {

struct Alias {
  std::string_view name;
  DType dtype;
};

// torch / numpy spellings users type in configuration files.
constexpr std::array kAliases = {
    Alias{"float64", DType::kF64},     Alias{"double", DType::kF64},
    Alias{"float32", DType::kF32},     Alias{"float", DType::kF32},
    Alias{"fp32", DType::kF32},        Alias{"float16", DType::kF16},
    Alias{"half", DType::kF16},        Alias{"fp16", DType::kF16},
    Alias{"bfloat16", DType::kBF16},   Alias{"float8_e4m3fn", DType::kF8E4M3},
    Alias{"fp8_e4m3", DType::kF8E4M3}, Alias{"float8_e5m2", DType::kF8E5M2},
    Alias{"fp8_e5m2", DType::kF8E5M2}, Alias{"int64", DType::kI64},
    Alias{"long", DType::kI64},        Alias{"int32", DType::kI32},
    Alias{"int", DType::kI32},         Alias{"int16", DType::kI16},
    Alias{"short", DType::kI16},       Alias{"int8", DType::kI8},
    Alias{"uint8", DType::kU8},        Alias{"bool_", DType::kBool},
};

}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (name == dtype_name(t) || name == dtype_safetensors_name(t)) return t;
  }
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const Alias& a : kAliases) {
    if (name == a.name) return a.dtype;
  }
  return std::nullopt;
}

DType parse_dtype(std::string_view name) {
  if (auto t = dtype_from_name(name)) return *t;
  std::string accepted;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (i) accepted += ", ";
    accepted += dtype_name(static_cast<DType>(i));
  }
  BRAID_FAIL(kInvalidArgument, "dtype '", name, "' is not known; expected one of ", accepted,
             " (or the safetensors / torch spelling)");
}

std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

}  // namespace braid
