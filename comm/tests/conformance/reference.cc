// Inputs and reference results of the conformance suite (reference.h). The fold is the rule of
// docs/shm.md, "Determinism", written out in scalar code: element by element, contribution 0
// starts the accumulator and ranks 1..n-1 are combined into it in rank order.
#include "reference.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "braid/core/error.h"

namespace braid::conformance::detail {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t draw(const Source& s, int rank, int64_t i) {
  return mix(s.salt ^ (static_cast<uint64_t>(rank) << 48) ^ static_cast<uint64_t>(i));
}

// kGeneral floats: multiples of 2^-30 in about [-1.6, 1.9], none in (-0.12, 0): no value rounds
// to -0, so min / max never have to choose between -0 and +0.
double general_float(uint64_t h) {
  const int k = static_cast<int>(h % 9) - 4;
  return k * 0.375 + static_cast<double>((h >> 8) % 64) / 256.0 +
         static_cast<double>((h >> 16) % 16384) * 0x1p-30;
}

double product_float(uint64_t h) {
  const double mag =
      0.5 + static_cast<double>(h % 40) / 32.0 + static_cast<double>((h >> 8) % 4096) * 0x1p-28;
  return (h >> 40) & 1 ? -mag : mag;
}

template <class T>
T make(const Source& s, int rank, int64_t i) {
  const uint64_t h = draw(s, rank, i);
  const bool general = s.values == Values::kGeneral;
  if constexpr (std::is_same_v<T, bool>) {
    return general ? (h & 1) != 0 : h % 8 != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (general) return std::is_signed_v<T> ? T(static_cast<int>(h % 9) - 4) : T(h % 9);
    int mag = i % s.ranks == rank ? 2 + static_cast<int>((h >> 1) & 1) : 1;
    if (std::is_signed_v<T> && ((h >> 2) & 1)) mag = -mag;
    return static_cast<T>(mag);
  } else {
    const double v = general ? general_float(h) : product_float(h);
    if constexpr (std::is_same_v<T, double>) {
      return v;
    } else if constexpr (std::is_same_v<T, float>) {
      return static_cast<float>(v);
    } else {
      return T(static_cast<float>(v));  // half, bfloat16, fp8: round to nearest even
    }
  }
}

// The accumulation type: f64 for f64, f32 for the other floats, i64 for integers and bool.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double,
                               std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

template <class T>
Acc<T> widen(T v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<Acc<T>>(v);  // exact: every narrow format fits in f32
  }
}

template <class T>
T narrow(Acc<T> a) {
  if constexpr (std::is_same_v<T, bool>) {
    return a != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(a));  // integers wrap
  } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return a;
  } else {
    return T(a);  // the one rounding of a narrow float
  }
}

template <class A>
A combine(ReduceOp op, A acc, A v) {
  switch (op) {
    case ReduceOp::kProd:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
      } else {
        return acc * v;
      }
    case ReduceOp::kMin:
      return v < acc ? v : acc;
    case ReduceOp::kMax:
      return v > acc ? v : acc;
    default:  // sum, avg and premul_sum add
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
      } else {
        return acc + v;
      }
  }
}

template <class A>
A average(A sum, int n) {
  if constexpr (std::is_integral_v<A>) {
    A q = sum / n;
    if (sum % n != 0 && sum < 0) --q;  // floor, as torch's //
    return q;
  } else {
    return sum / static_cast<A>(n);  // a division, not a multiplication by 1/n
  }
}

template <class T>
Bytes reduce_typed(const Source& s, ReduceOp op, int64_t begin, int64_t count) {
  using A = Acc<T>;
  std::vector<A> factors;
  for (int r = 0; r < s.ranks; ++r) factors.push_back(static_cast<A>(premul_factor(r)));
  Bytes out(static_cast<size_t>(count) * sizeof(T));
  for (int64_t i = 0; i < count; ++i) {
    A acc{};
    for (int r = 0; r < s.ranks; ++r) {
      A v = widen(make<T>(s, r, begin + i));
      if (op == ReduceOp::kPremulSum) v = v * factors[r];
      acc = r == 0 ? v : combine(op, acc, v);
    }
    if (op == ReduceOp::kAvg) acc = average(acc, s.ranks);
    const T result = narrow<T>(acc);
    std::memcpy(out.data() + i * sizeof(T), &result, sizeof(T));
  }
  return out;
}

template <class T>
void fill_typed(const Source& s, int rank, int64_t begin, int64_t count, void* out) {
  auto* bytes = static_cast<uint8_t*>(out);
  for (int64_t i = 0; i < count; ++i) {
    const T v = make<T>(s, rank, begin + i);
    std::memcpy(bytes + i * sizeof(T), &v, sizeof(T));
  }
}

template <class T>
double as_double(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

double element_value(DType dtype, const uint8_t* p) {
  switch (dtype) {
#define BRAID_CONF_VALUE(e, nm, st, T, sz, fl) \
  case DType::e:                               \
    return as_double<T>(p);
    BRAID_FOR_EACH_DTYPE(BRAID_CONF_VALUE)
#undef BRAID_CONF_VALUE
  }
  return 0;
}

std::string element_text(DType dtype, const uint8_t* p) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, dtype_size(dtype));  // little-endian hosts only, as braid
  char text[96];
  std::snprintf(text, sizeof text, "%.9g (bits 0x%0*llx)", element_value(dtype, p),
                static_cast<int>(2 * dtype_size(dtype)), static_cast<unsigned long long>(bits));
  return text;
}

}  // namespace

void fill_input(const Source& s, int rank, int64_t begin, int64_t count, void* out) {
  switch (s.dtype) {
#define BRAID_CONF_FILL(e, nm, st, T, sz, fl) \
  case DType::e:                              \
    return fill_typed<T>(s, rank, begin, count, out);
    BRAID_FOR_EACH_DTYPE(BRAID_CONF_FILL)
#undef BRAID_CONF_FILL
  }
}

Bytes input_bytes(const Source& s, int rank, int64_t begin, int64_t count) {
  Bytes out(static_cast<size_t>(count) * dtype_size(s.dtype));
  fill_input(s, rank, begin, count, out.data());
  return out;
}

bool op_allowed(ReduceOp op, DType dtype) {
  if (op == ReduceOp::kPremulSum) return is_floating(dtype);
  if (op == ReduceOp::kAvg) return dtype != DType::kBool;
  return true;
}

double premul_factor(int rank) {
  return 0.75 + 0.3 * rank;  // not a binary fraction: rounding it to f32 matters
}

Bytes reduce_reference(const Source& s, ReduceOp op, int64_t begin, int64_t count) {
  BRAID_ASSERT(op_allowed(op, s.dtype), "conformance: no reference for ", reduce_op_name(op),
               " on ", dtype_name(s.dtype));
  switch (s.dtype) {
#define BRAID_CONF_REDUCE(e, nm, st, T, sz, fl) \
  case DType::e:                                \
    return reduce_typed<T>(s, op, begin, count);
    BRAID_FOR_EACH_DTYPE(BRAID_CONF_REDUCE)
#undef BRAID_CONF_REDUCE
  }
  return {};
}

std::string first_difference(DType dtype, const void* got, const void* want, int64_t count) {
  const size_t es = dtype_size(dtype);
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  if (count == 0 || std::memcmp(g, w, count * es) == 0) return {};
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) != 0) {
      return "element " + std::to_string(i) + " is " + element_text(dtype, g + i * es) +
             ", expected " + element_text(dtype, w + i * es);
    }
  }
  return {};
}

}  // namespace braid::conformance::detail
