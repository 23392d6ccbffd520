// axpby() and scale(): out = alpha x + beta y and out = alpha x, contiguous, out may alias x or
// y. f32 / f16 / bf16 compute in f32 with alpha and beta rounded to f32 (SIMD paths in
// elementwise_ops.h); f64 computes in f64 with scalar loops at every level (memory bound).
// beta == 0 does not read y, as BLAS: NaN or garbage in y does not propagate.
#include <type_traits>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "elementwise_kernels.h"

namespace braid::kernels::cpu {
namespace {

template <class T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
void axpby_loop(int64_t n, double alpha, const void* xv, double beta, const void* yv, void* outv) {
  using C = Compute<T>;
  const T* x = static_cast<const T*>(xv);
  const T* y = static_cast<const T*>(yv);
  T* out = static_cast<T*>(outv);
  const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
  for (int64_t i = 0; i < n; ++i) {
    // two products and one sum, each rounded (no FMA), as the SIMD paths compute it
    const C ax = a * static_cast<C>(x[i]);
    const C by = b * static_cast<C>(y[i]);
    out[i] = T(ax + by);
  }
}

template <class T>
void scale_loop(int64_t n, double alpha, const void* xv, void* outv) {
  using C = Compute<T>;
  const T* x = static_cast<const T*>(xv);
  T* out = static_cast<T*>(outv);
  const C a = static_cast<C>(alpha);
  for (int64_t i = 0; i < n; ++i) out[i] = T(a * static_cast<C>(x[i]));
}

const EwTables<AxpbyTable>& axpby_tables() {
  static const EwTables<AxpbyTable> tables(scalar::fill_axpby_table, avx2::fill_axpby_table,
                                           avx512::fill_axpby_table);
  return tables;
}

int check_args(const char* kernel, DType dtype, int64_t n) {
  const int dt = ew_dtype_index(dtype);
  BRAID_CHECK(dt >= 0 && dt < kNumFloatEwDtypes, kNotSupported, kernel, ": dtype ", dtype,
              " is not supported (expected f64, f32, f16 or bf16)");
  BRAID_CHECK(n >= 0, kInvalidArgument, kernel, ": element count ", n, " must be >= 0");
  return dt;
}

}  // namespace

namespace scalar {
void fill_axpby_table(AxpbyTable& t) {
  t.axpby[kEwF64] = axpby_loop<double>;
  t.axpby[kEwF32] = axpby_loop<float>;
  t.axpby[kEwF16] = axpby_loop<half>;
  t.axpby[kEwBF16] = axpby_loop<bfloat16>;
  t.scale[kEwF64] = scale_loop<double>;
  t.scale[kEwF32] = scale_loop<float>;
  t.scale[kEwF16] = scale_loop<half>;
  t.scale[kEwBF16] = scale_loop<bfloat16>;
}
}  // namespace scalar

void axpby(DType dtype, int64_t n, double alpha, const void* x, double beta, const void* y,
           void* out) {
  const int dt = check_args("axpby", dtype, n);
  if (n == 0) return;
  if (beta == 0.0) {
    scale(dtype, n, alpha, x, out);
    return;
  }
  BRAID_CHECK(x && y && out, kInvalidArgument, "axpby: null ",
              !x   ? "x"
              : !y ? "y"
                   : "out",
              " pointer for ", n, " elements of ", dtype);
  axpby_tables().pick.get()->axpby[dt](n, alpha, x, beta, y, out);
}

void scale(DType dtype, int64_t n, double alpha, const void* x, void* out) {
  const int dt = check_args("scale", dtype, n);
  if (n == 0) return;
  BRAID_CHECK(x && out, kInvalidArgument, "scale: null ", !x ? "x" : "out", " pointer for ", n,
              " elements of ", dtype);
  axpby_tables().pick.get()->scale[dt](n, alpha, x, out);
}

}  // namespace braid::kernels::cpu
