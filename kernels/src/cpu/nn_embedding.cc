// embedding_forward() / embedding_backward(): row gather and ordered scatter-add. Rows are
// copied as bytes (any dtype); the scatter-add runs ids in order, so a row hit by several ids
// sums them in a fixed order (the same bits every run, as the design promises).
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"

namespace braid::kernels::cpu {
namespace {

void check_embedding_args(const char* name, int64_t num, int64_t dim, DType id_dtype, int64_t n) {
  BRAID_CHECK(num >= 0 && dim >= 0 && n >= 0, kInvalidArgument, name, ": table [", num, ", ", dim,
              "] and id count ", n, " must not be negative");
  BRAID_CHECK(id_dtype == DType::kI64 || id_dtype == DType::kI32, kNotSupported, name,
              ": id dtype ", id_dtype, " is not supported; expected i64 or i32");
}

int64_t checked_id(const char* name, DType id_dtype, const void* ids, int64_t i, int64_t num) {
  const int64_t id = id_dtype == DType::kI64 ? static_cast<const int64_t*>(ids)[i]
                                             : static_cast<const int32_t*>(ids)[i];
  BRAID_CHECK(id >= 0 && id < num, kOutOfRange, name, ": id ", id, " at position ", i,
              " is outside [0, ", num, ")");
  return id;
}

template <typename T>
void scatter_add(int64_t num, int64_t dim, DType id_dtype, const void* ids, int64_t n, const T* dy,
                 T* dweight) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = checked_id("embedding_backward", id_dtype, ids, i, num);
    T* dst = dweight + id * dim;
    const T* src = dy + i * dim;
    for (int64_t k = 0; k < dim; ++k) dst[k] += src[k];
  }
}

}  // namespace

void embedding_forward(DType dtype, int64_t num, int64_t dim, const void* weight, DType id_dtype,
                       const void* ids, int64_t n, void* out) {
  check_embedding_args("embedding_forward", num, dim, id_dtype, n);
  if (n == 0) return;
  BRAID_CHECK(ids != nullptr && (dim == 0 || (weight != nullptr && out != nullptr)),
              kInvalidArgument, "embedding_forward: null weight, ids or out");
  const size_t row_bytes = static_cast<size_t>(dim) * dtype_size(dtype);
  const auto* w = static_cast<const char*>(weight);
  auto* o = static_cast<char*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = checked_id("embedding_forward", id_dtype, ids, i, num);
    if (row_bytes != 0) std::memcpy(o + i * row_bytes, w + id * row_bytes, row_bytes);
  }
}

void embedding_backward(DType dtype, int64_t num, int64_t dim, DType id_dtype, const void* ids,
                        int64_t n, const void* dy, void* dweight) {
  check_embedding_args("embedding_backward", num, dim, id_dtype, n);
  BRAID_CHECK(dtype == DType::kF32 || dtype == DType::kF64, kNotSupported,
              "embedding_backward: dtype ", dtype, " is not supported; expected f32 or f64");
  if (n == 0) return;
  BRAID_CHECK(ids != nullptr && (dim == 0 || (dy != nullptr && dweight != nullptr)),
              kInvalidArgument, "embedding_backward: null ids, dy or dweight");
  if (dtype == DType::kF64) {
    scatter_add(num, dim, id_dtype, ids, n, static_cast<const double*>(dy),
                static_cast<double*>(dweight));
  } else {
    scatter_add(num, dim, id_dtype, ids, n, static_cast<const float*>(dy),
                static_cast<float*>(dweight));
  }
}

}  // namespace braid::kernels::cpu
