// binary(): out = a op b over an n-d index space with broadcasting. Dimensions are first
// coalesced (size-1 dimensions dropped, neighbours merged when both operands are dense across
// them), then each row of the innermost dimension runs one inner loop picked once per call:
// the SIMD table's (contiguous, contiguous), (contiguous, scalar) or (scalar, contiguous)
// loop, or the generic strided loop here. f64 and the integer dtypes run scalar loops at
// every level: they are memory bound already, and integer division must check for zero.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "elementwise_kernels.h"

namespace braid::kernels::cpu {
namespace {

// The value type arithmetic runs in: f32 for the narrow floats.
template <class T>
using Compute =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <BinaryOp kOp, class C>
C apply(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (kOp == BinaryOp::kAdd) return a + b;
    if constexpr (kOp == BinaryOp::kSub) return a - b;
    if constexpr (kOp == BinaryOp::kMul) return a * b;
    if constexpr (kOp == BinaryOp::kDiv) return a / b;
    if constexpr (kOp == BinaryOp::kMax) return std::isnan(a) ? a : (a > b ? a : b);
    if constexpr (kOp == BinaryOp::kMin) return std::isnan(a) ? a : (a < b ? a : b);
  } else {
    using U = std::make_unsigned_t<C>;  // two's-complement wrap, no UB
    if constexpr (kOp == BinaryOp::kAdd) return static_cast<C>(U(a) + U(b));
    if constexpr (kOp == BinaryOp::kSub) return static_cast<C>(U(a) - U(b));
    if constexpr (kOp == BinaryOp::kMul) return static_cast<C>(U(a) * U(b));
    if constexpr (kOp == BinaryOp::kDiv) {
      BRAID_CHECK(b != 0, kInvalidArgument, "binary: integer division by zero (dividend ", a,
                  ", dtype ", dtype_of<C>(), ")");
      if (b == -1) return static_cast<C>(U(0) - U(a));  // min / -1 wraps to min
      return a / b;
    }
    if constexpr (kOp == BinaryOp::kMax) return a > b ? a : b;
    if constexpr (kOp == BinaryOp::kMin) return a < b ? a : b;
  }
}

template <class T, BinaryOp kOp>
void strided_loop(int64_t n, const T* a, int64_t sa, const T* b, int64_t sb, T* out) {
  using C = Compute<T>;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = T(apply<kOp>(static_cast<C>(a[i * sa]), static_cast<C>(b[i * sb])));
  }
}

template <class T, BinaryOp kOp, BinaryPattern kPattern>
void scalar_loop(int64_t n, const void* a, const void* b, void* out) {
  strided_loop<T, kOp>(n, static_cast<const T*>(a), kPattern == kScalarVec ? 0 : 1,
                       static_cast<const T*>(b), kPattern == kVecScalar ? 0 : 1,
                       static_cast<T*>(out));
}

using StridedFn = void (*)(int64_t n, const void* a, int64_t sa, const void* b, int64_t sb,
                           void* out);

template <class T, BinaryOp kOp>
void strided_entry(int64_t n, const void* a, int64_t sa, const void* b, int64_t sb, void* out) {
  strided_loop<T, kOp>(n, static_cast<const T*>(a), sa, static_cast<const T*>(b), sb,
                       static_cast<T*>(out));
}

// Calls fn(std::integral_constant<BinaryOp, op>) for each op.
template <class Fn>
void for_each_op(Fn&& fn) {
  fn(std::integral_constant<BinaryOp, BinaryOp::kAdd>{});
  fn(std::integral_constant<BinaryOp, BinaryOp::kSub>{});
  fn(std::integral_constant<BinaryOp, BinaryOp::kMul>{});
  fn(std::integral_constant<BinaryOp, BinaryOp::kDiv>{});
  fn(std::integral_constant<BinaryOp, BinaryOp::kMax>{});
  fn(std::integral_constant<BinaryOp, BinaryOp::kMin>{});
}

template <class Fn>
void for_each_dtype(Fn&& fn) {
  fn(kEwF64, double{});
  fn(kEwF32, float{});
  fn(kEwF16, half{});
  fn(kEwBF16, bfloat16{});
  fn(kEwI64, int64_t{});
  fn(kEwI32, int32_t{});
}

struct StridedTable {
  StridedFn fn[kNumBinaryOps][kNumEwDtypes] = {};
  StridedTable() {
    for_each_dtype([&](int dt, auto tag) {
      using T = decltype(tag);
      for_each_op(
          [&](auto op) { fn[static_cast<int>(op.value)][dt] = strided_entry<T, op.value>; });
    });
  }
};

// Dimensions after dropping size-1 ones and merging neighbours both operands walk densely.
struct Layout {
  std::vector<int64_t> shape, sa, sb;
  bool empty = false;
};

Layout coalesce(int ndim, const int64_t* shape, const int64_t* a_strides,
                const int64_t* b_strides) {
  Layout l;
  for (int d = 0; d < ndim; ++d) {
    BRAID_CHECK(shape[d] >= 0, kInvalidArgument, "binary: shape[", d, "] = ", shape[d],
                " must be >= 0");
    if (shape[d] == 0) l.empty = true;
    if (shape[d] == 1) continue;
    if (!l.shape.empty() && l.sa.back() == a_strides[d] * shape[d] &&
        l.sb.back() == b_strides[d] * shape[d]) {
      l.shape.back() *= shape[d];
      l.sa.back() = a_strides[d];
      l.sb.back() = b_strides[d];
      continue;
    }
    l.shape.push_back(shape[d]);
    l.sa.push_back(a_strides[d]);
    l.sb.push_back(b_strides[d]);
  }
  return l;
}

const EwTables<BinaryTable>& binary_tables() {
  static const EwTables<BinaryTable> tables(scalar::fill_binary_table, avx2::fill_binary_table,
                                            avx512::fill_binary_table);
  return tables;
}

}  // namespace

namespace scalar {
void fill_binary_table(BinaryTable& t) {
  for_each_dtype([&](int dt, auto tag) {
    using T = decltype(tag);
    for_each_op([&](auto op) {
      auto& row = t.fn[static_cast<int>(op.value)][dt];
      row[kVecVec] = scalar_loop<T, op.value, kVecVec>;
      row[kVecScalar] = scalar_loop<T, op.value, kVecScalar>;
      row[kScalarVec] = scalar_loop<T, op.value, kScalarVec>;
    });
  });
}
}  // namespace scalar

void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out) {
  const int dt = ew_dtype_index(dtype);
  BRAID_CHECK(dt >= 0, kNotSupported, "binary: dtype ", dtype,
              " is not supported (expected f64, f32, f16, bf16, i64 or i32)");
  const int op_index = static_cast<int>(op);
  BRAID_CHECK(op_index >= 0 && op_index < kNumBinaryOps, kInvalidArgument, "binary: op value ",
              op_index, " is not a BinaryOp");
  BRAID_CHECK(ndim >= 0, kInvalidArgument, "binary: ndim ", ndim, " must be >= 0");
  BRAID_CHECK(ndim == 0 || (shape && a_strides && b_strides), kInvalidArgument, "binary: ndim ",
              ndim, " with a null shape or strides pointer");
  auto unit_or_zero = [](int64_t stride) { return stride == 0 || stride == 1; };
  if (ndim == 1 && shape[0] > 0 && a && b && out && unit_or_zero(a_strides[0]) &&
      unit_or_zero(b_strides[0]) && (a_strides[0] == 1 || b_strides[0] == 1)) {
    // One dense run (the reductions' case): straight to the kernel, no layout to allocate.
    const auto& row = binary_tables().pick.get()->fn[op_index][dt];
    const int pattern = a_strides[0] == 0 ? kScalarVec : b_strides[0] == 0 ? kVecScalar : kVecVec;
    if (BinaryFn fn = row[pattern]) {
      fn(shape[0], static_cast<const char*>(a), static_cast<const char*>(b),
         static_cast<char*>(out));
      return;
    }
  }
  const Layout l = coalesce(ndim, shape, a_strides, b_strides);
  if (l.empty) return;
  BRAID_CHECK(a && b && out, kInvalidArgument, "binary: null ",
              !a   ? "a"
              : !b ? "b"
                   : "out",
              " pointer for a non-empty ", dtype, " operation");

  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int rank = static_cast<int>(l.shape.size());
  const int64_t inner = rank ? l.shape.back() : 1;
  const int64_t ia = rank ? l.sa.back() : 0, ib = rank ? l.sb.back() : 0;
  BinaryFn contiguous = nullptr;
  const auto& row = binary_tables().pick.get()->fn[op_index][dt];
  if (ia == 1 && ib == 1) contiguous = row[kVecVec];
  if (ia == 1 && ib == 0) contiguous = row[kVecScalar];
  if (ia == 0 && ib == 1) contiguous = row[kScalarVec];
  static const StridedTable strided;
  const StridedFn general = strided.fn[op_index][dt];

  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  char* po = static_cast<char*>(out);
  std::vector<int64_t> index(rank > 1 ? rank - 1 : 1, 0);
  while (true) {
    if (contiguous) {
      contiguous(inner, pa, pb, po);
    } else {
      general(inner, pa, ia, pb, ib, po);
    }
    po += inner * esize;
    int d = rank - 2;
    for (; d >= 0; --d) {  // advance the outer index, odometer style
      pa += l.sa[d] * esize;
      pb += l.sb[d] * esize;
      if (++index[d] < l.shape[d]) break;
      pa -= l.sa[d] * l.shape[d] * esize;
      pb -= l.sb[d] * l.shape[d] * esize;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace braid::kernels::cpu
