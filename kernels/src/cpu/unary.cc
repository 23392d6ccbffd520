// unary(): out = op(x) for the float dtypes. The scalar loops here are the reference: every
// op is evaluated in double with <cmath> and rounded once to the output dtype, so they are
// accurate to half an ulp of f32 / f16 / bf16 (f64 results carry <cmath>'s own error). The
// SIMD levels (elementwise_ops.h, elementwise_math.h) serve f32, f16 and bf16; f64 stays on
// these loops at every level.
#include <cmath>
#include <type_traits>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "cast_scalar.h"
#include "elementwise_kernels.h"

namespace braid::kernels::cpu {
namespace {

template <UnaryOp kOp>
double apply(double x) {
  constexpr double kSqrt1_2 = 0.70710678118654752440;
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  if constexpr (kOp == UnaryOp::kExp) return std::exp(x);
  if constexpr (kOp == UnaryOp::kLog) return std::log(x);
  if constexpr (kOp == UnaryOp::kTanh) return std::tanh(x);
  if constexpr (kOp == UnaryOp::kSigmoid) return 1.0 / (1.0 + std::exp(-x));
  if constexpr (kOp == UnaryOp::kRelu) return x < 0 ? 0.0 : x;  // NaN and -0 pass through
  if constexpr (kOp == UnaryOp::kGelu) return 0.5 * x * std::erfc(-x * kSqrt1_2);
  if constexpr (kOp == UnaryOp::kGeluTanh) {
    // 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): no cancellation for x < 0
    const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
    return x / (1.0 + std::exp(-2.0 * u));
  }
  if constexpr (kOp == UnaryOp::kSilu) return x / (1.0 + std::exp(-x));
  if constexpr (kOp == UnaryOp::kSqrt) return std::sqrt(x);
  if constexpr (kOp == UnaryOp::kRsqrt) return 1.0 / std::sqrt(x);
  if constexpr (kOp == UnaryOp::kNeg) return -x;
  if constexpr (kOp == UnaryOp::kAbs) return std::fabs(x);
}

template <class T>
double load(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

// Rounds a double result once: f16 / bf16 go through f32 rounded to odd (cast_scalar.h).
template <class T>
T store(double r) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(r);
  } else {
    return T(cast_detail::f32_round_odd(r));
  }
}

template <class T, UnaryOp kOp>
void scalar_loop(int64_t n, const void* xv, void* outv) {
  const T* x = static_cast<const T*>(xv);
  T* out = static_cast<T*>(outv);
  for (int64_t i = 0; i < n; ++i) out[i] = store<T>(apply<kOp>(load(x[i])));
}

template <class T>
void set_dtype(UnaryTable& t, int dt) {
  auto set = [&](auto op) { t.fn[static_cast<int>(op.value)][dt] = scalar_loop<T, op.value>; };
  set(std::integral_constant<UnaryOp, UnaryOp::kExp>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kLog>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kTanh>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSigmoid>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kRelu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kGelu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kGeluTanh>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSilu>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kSqrt>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kRsqrt>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kNeg>{});
  set(std::integral_constant<UnaryOp, UnaryOp::kAbs>{});
}

}  // namespace

namespace scalar {
void fill_unary_table(UnaryTable& t) {
  set_dtype<double>(t, kEwF64);
  set_dtype<float>(t, kEwF32);
  set_dtype<half>(t, kEwF16);
  set_dtype<bfloat16>(t, kEwBF16);
}
}  // namespace scalar

void unary(UnaryOp op, DType dtype, int64_t n, const void* x, void* out) {
  const int dt = ew_dtype_index(dtype);
  BRAID_CHECK(dt >= 0 && dt < kNumFloatEwDtypes, kNotSupported, "unary: dtype ", dtype,
              " is not supported (expected f64, f32, f16 or bf16)");
  const int op_index = static_cast<int>(op);
  BRAID_CHECK(op_index >= 0 && op_index < kNumUnaryOps, kInvalidArgument, "unary: op value ",
              op_index, " is not a UnaryOp");
  BRAID_CHECK(n >= 0, kInvalidArgument, "unary: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(x && out, kInvalidArgument, "unary: null ", !x ? "x" : "out", " pointer for ", n,
              " elements of ", dtype);
  static const EwTables<UnaryTable> tables(scalar::fill_unary_table, avx2::fill_unary_table,
                                           avx512::fill_unary_table);
  tables.pick.get()->fn[op_index][dt](n, x, out);
}

}  // namespace braid::kernels::cpu
