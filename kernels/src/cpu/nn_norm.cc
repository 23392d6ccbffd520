// layer_norm_* and rms_norm_*: the fused normalization kernels of nn/'s LayerNorm and RMSNorm
// (docs/kernels.md, "Layer kernels"). One template serves f32 and f64. Row sums use eight
// partial sums (element k into partial k % 8, folded pairwise in a fixed order): the same bits
// on every run and every machine, and independent chains the compiler can keep in flight.
// Parameter gradients are column sums over rows in row order.
#include <cmath>
#include <cstring>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"

namespace braid::kernels::cpu {
namespace {

constexpr int kParts = 8;

template <typename T>
T fold(T (&p)[kParts]) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

// sum_k f(k) with kParts partial sums.
template <typename T, typename F>
T row_sum(int64_t d, F&& f) {
  T p[kParts] = {};
  int64_t k = 0;
  for (; k + kParts <= d; k += kParts) {
    for (int j = 0; j < kParts; ++j) p[j] += f(k + j);
  }
  for (int j = 0; k < d; ++k, ++j) p[j] += f(k);
  return fold(p);
}

void check_norm_args(const char* name, DType dtype, int64_t rows, int64_t d) {
  BRAID_CHECK(rows >= 0 && d >= 0, kInvalidArgument, name, ": shape [rows ", rows, ", d ", d,
              "] must not be negative");
  BRAID_CHECK(dtype == DType::kF32 || dtype == DType::kF64, kNotSupported, name, ": dtype ", dtype,
              " is not supported; expected f32 or f64");
}

template <typename T>
void ln_forward(int64_t rows, int64_t d, const T* x, const T* w, const T* b, T eps, T* y, T* mean,
                T* rstd) {
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const T mu = row_sum<T>(d, [&](int64_t k) { return xr[k]; }) * inv_d;
    const T var = row_sum<T>(d, [&](int64_t k) { return (xr[k] - mu) * (xr[k] - mu); }) * inv_d;
    const T rs = T(1) / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    if (w != nullptr && b != nullptr) {
      for (int64_t k = 0; k < d; ++k) yr[k] = (xr[k] - mu) * rs * w[k] + b[k];
    } else if (w != nullptr) {
      for (int64_t k = 0; k < d; ++k) yr[k] = (xr[k] - mu) * rs * w[k];
    } else if (b != nullptr) {
      for (int64_t k = 0; k < d; ++k) yr[k] = (xr[k] - mu) * rs + b[k];
    } else {
      for (int64_t k = 0; k < d; ++k) yr[k] = (xr[k] - mu) * rs;
    }
  }
}

template <typename T>
void ln_backward(int64_t rows, int64_t d, const T* x, const T* w, const T* mean, const T* rstd,
                 const T* dy, T* dx, T* dw, T* db) {
  if (dw != nullptr) std::memset(dw, 0, static_cast<size_t>(d) * sizeof(T));
  if (db != nullptr) std::memset(db, 0, static_cast<size_t>(d) * sizeof(T));
  const T inv_d = T(1) / static_cast<T>(d);
  std::vector<T> g(dx != nullptr ? static_cast<size_t>(d) : 0);
  std::vector<T> xhat(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T mu = mean[r], rs = rstd[r];
    for (int64_t k = 0; k < d; ++k) xhat[k] = (xr[k] - mu) * rs;
    if (dw != nullptr) {
      for (int64_t k = 0; k < d; ++k) dw[k] += dyr[k] * xhat[k];
    }
    if (db != nullptr) {
      for (int64_t k = 0; k < d; ++k) db[k] += dyr[k];
    }
    if (dx == nullptr) continue;
    if (w != nullptr) {
      for (int64_t k = 0; k < d; ++k) g[k] = dyr[k] * w[k];
    } else {
      std::memcpy(g.data(), dyr, static_cast<size_t>(d) * sizeof(T));
    }
    const T mg = row_sum<T>(d, [&](int64_t k) { return g[k]; }) * inv_d;
    const T mgx = row_sum<T>(d, [&](int64_t k) { return g[k] * xhat[k]; }) * inv_d;
    T* dxr = dx + r * d;
    for (int64_t k = 0; k < d; ++k) dxr[k] = rs * (g[k] - mg - xhat[k] * mgx);
  }
}

template <typename T>
void rms_forward(int64_t rows, int64_t d, const T* x, const T* w, T eps, T* y, T* rstd) {
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const T ms = row_sum<T>(d, [&](int64_t k) { return xr[k] * xr[k]; }) * inv_d;
    const T rs = T(1) / std::sqrt(ms + eps);
    rstd[r] = rs;
    if (w != nullptr) {
      for (int64_t k = 0; k < d; ++k) yr[k] = xr[k] * rs * w[k];
    } else {
      for (int64_t k = 0; k < d; ++k) yr[k] = xr[k] * rs;
    }
  }
}

template <typename T>
void rms_backward(int64_t rows, int64_t d, const T* x, const T* w, const T* rstd, const T* dy,
                  T* dx, T* dw) {
  if (dw != nullptr) std::memset(dw, 0, static_cast<size_t>(d) * sizeof(T));
  const T inv_d = T(1) / static_cast<T>(d);
  std::vector<T> g(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T rs = rstd[r];
    if (dw != nullptr) {
      for (int64_t k = 0; k < d; ++k) dw[k] += dyr[k] * (xr[k] * rs);
    }
    if (dx == nullptr) continue;
    if (w != nullptr) {
      for (int64_t k = 0; k < d; ++k) g[k] = dyr[k] * w[k];
    } else {
      std::memcpy(g.data(), dyr, static_cast<size_t>(d) * sizeof(T));
    }
    const T mgx = row_sum<T>(d, [&](int64_t k) { return g[k] * (xr[k] * rs); }) * inv_d;
    T* dxr = dx + r * d;
    for (int64_t k = 0; k < d; ++k) dxr[k] = rs * (g[k] - (xr[k] * rs) * mgx);
  }
}

}  // namespace

void layer_norm_forward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                        const void* b, double eps, void* y, void* mean, void* rstd) {
  check_norm_args("layer_norm_forward", dtype, rows, d);
  if (rows == 0) return;
  BRAID_CHECK(d > 0, kInvalidArgument, "layer_norm_forward: rows of length 0 have no mean");
  BRAID_CHECK(x != nullptr && y != nullptr && mean != nullptr && rstd != nullptr, kInvalidArgument,
              "layer_norm_forward: null x, y, mean or rstd");
  if (dtype == DType::kF64) {
    ln_forward(rows, d, static_cast<const double*>(x), static_cast<const double*>(w),
               static_cast<const double*>(b), eps, static_cast<double*>(y),
               static_cast<double*>(mean), static_cast<double*>(rstd));
  } else {
    ln_forward(rows, d, static_cast<const float*>(x), static_cast<const float*>(w),
               static_cast<const float*>(b), static_cast<float>(eps), static_cast<float*>(y),
               static_cast<float*>(mean), static_cast<float*>(rstd));
  }
}

void layer_norm_backward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                         const void* mean, const void* rstd, const void* dy, void* dx, void* dw,
                         void* db) {
  check_norm_args("layer_norm_backward", dtype, rows, d);
  BRAID_CHECK(rows == 0 || (x != nullptr && mean != nullptr && rstd != nullptr && dy != nullptr),
              kInvalidArgument, "layer_norm_backward: null x, mean, rstd or dy");
  if (dtype == DType::kF64) {
    ln_backward(rows, d, static_cast<const double*>(x), static_cast<const double*>(w),
                static_cast<const double*>(mean), static_cast<const double*>(rstd),
                static_cast<const double*>(dy), static_cast<double*>(dx), static_cast<double*>(dw),
                static_cast<double*>(db));
  } else {
    ln_backward(rows, d, static_cast<const float*>(x), static_cast<const float*>(w),
                static_cast<const float*>(mean), static_cast<const float*>(rstd),
                static_cast<const float*>(dy), static_cast<float*>(dx), static_cast<float*>(dw),
                static_cast<float*>(db));
  }
}

void rms_norm_forward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                      double eps, void* y, void* rstd) {
  check_norm_args("rms_norm_forward", dtype, rows, d);
  if (rows == 0) return;
  BRAID_CHECK(d > 0, kInvalidArgument, "rms_norm_forward: rows of length 0 have no mean square");
  BRAID_CHECK(x != nullptr && y != nullptr && rstd != nullptr, kInvalidArgument,
              "rms_norm_forward: null x, y or rstd");
  if (dtype == DType::kF64) {
    rms_forward(rows, d, static_cast<const double*>(x), static_cast<const double*>(w), eps,
                static_cast<double*>(y), static_cast<double*>(rstd));
  } else {
    rms_forward(rows, d, static_cast<const float*>(x), static_cast<const float*>(w),
                static_cast<float>(eps), static_cast<float*>(y), static_cast<float*>(rstd));
  }
}

void rms_norm_backward(DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                       const void* rstd, const void* dy, void* dx, void* dw) {
  check_norm_args("rms_norm_backward", dtype, rows, d);
  BRAID_CHECK(rows == 0 || (x != nullptr && rstd != nullptr && dy != nullptr), kInvalidArgument,
              "rms_norm_backward: null x, rstd or dy");
  if (dtype == DType::kF64) {
    rms_backward(rows, d, static_cast<const double*>(x), static_cast<const double*>(w),
                 static_cast<const double*>(rstd), static_cast<const double*>(dy),
                 static_cast<double*>(dx), static_cast<double*>(dw));
  } else {
    rms_backward(rows, d, static_cast<const float*>(x), static_cast<const float*>(w),
                 static_cast<const float*>(rstd), static_cast<const float*>(dy),
                 static_cast<float*>(dx), static_cast<float*>(dw));
  }
}

}  // namespace braid::kernels::cpu
