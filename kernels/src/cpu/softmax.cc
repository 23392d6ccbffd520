// softmax(): argument checks, the scalar reference row (std::exp, same three passes as the
// SIMD rows in reduce_simd.h), the f64 path (scalar at every level), and the f16 / bf16
// widening to an f32 row buffer and rounding back.
#include <cmath>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "isa_dispatch.h"
#include "reduce_impl.h"

namespace braid::kernels::cpu {
namespace {

// Max subtraction; max is NaN when any element is NaN; a row of only -Inf gives NaN (as torch).
template <typename T>
void softmax_row_ref(const T* x, T* out, int64_t len, bool log) {
  T m = x[0];
  for (int64_t k = 1; k < len; ++k) m = lane_step<AccOp::kMax>(m, x[k]);
  T sum = 0;
  for (int64_t k = 0; k < len; ++k) {
    const T e = std::exp(x[k] - m);
    if (!log) out[k] = e;
    sum += e;
  }
  if (log) {
    const T log_sum = std::log(sum);
    for (int64_t k = 0; k < len; ++k) out[k] = (x[k] - m) - log_sum;
  } else {
    for (int64_t k = 0; k < len; ++k) out[k] /= sum;
  }
}

constexpr IsaTable<SoftmaxRowFn> kSoftmaxRow{scalar::softmax_row, avx2::softmax_row,
                                             avx512::softmax_row, nullptr};

template <typename T>
void softmax_reduced(int64_t rows, int64_t len, const T* x, T* out, bool log) {
  const SoftmaxRowFn row_fn = kSoftmaxRow.get();
  std::vector<float> row(static_cast<size_t>(len));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * len;
    for (int64_t k = 0; k < len; ++k) row[k] = static_cast<float>(xr[k]);
    row_fn(row.data(), row.data(), len, log);
    T* orow = out + r * len;
    for (int64_t k = 0; k < len; ++k) orow[k] = T(row[k]);
  }
}

}  // namespace

namespace scalar {
void softmax_row(const float* x, float* out, int64_t len, bool log) {
  softmax_row_ref(x, out, len, log);
}
}  // namespace scalar

void softmax(DType dtype, int64_t rows, int64_t len, const void* x, void* out, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  BRAID_CHECK(rows >= 0 && len >= 0, kInvalidArgument, name, ": shape [rows ", rows, ", len ", len,
              "] must not be negative");
  BRAID_CHECK(
      dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
      kNotSupported, name, ": dtype ", dtype, " is not supported; expected f64, f32, f16 or bf16");
  if (rows == 0 || len == 0) return;
  BRAID_CHECK(x != nullptr && out != nullptr, kInvalidArgument, name, ": null pointer (x ", x,
              ", out ", out, ") for ", rows, " x ", len, " elements");
  switch (dtype) {
    case DType::kF64: {
      const auto* xd = static_cast<const double*>(x);
      auto* od = static_cast<double*>(out);
      for (int64_t r = 0; r < rows; ++r) softmax_row_ref(xd + r * len, od + r * len, len, log);
      return;
    }
    case DType::kF32: {
      const SoftmaxRowFn row_fn = kSoftmaxRow.get();
      const auto* xf = static_cast<const float*>(x);
      auto* of = static_cast<float*>(out);
      for (int64_t r = 0; r < rows; ++r) row_fn(xf + r * len, of + r * len, len, log);
      return;
    }
    case DType::kF16:
      return softmax_reduced(rows, len, static_cast<const half*>(x), static_cast<half*>(out), log);
    case DType::kBF16:
      return softmax_reduced(rows, len, static_cast<const bfloat16*>(x),
                             static_cast<bfloat16*>(out), log);
    default:
      return;
  }
}

}  // namespace braid::kernels::cpu
