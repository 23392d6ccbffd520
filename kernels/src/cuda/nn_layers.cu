// The normalization and embedding kernels of the cuda table (cpu.h, "layers (nn)"): LayerNorm
// and RMSNorm forward / backward (f32, f64) and the embedding gather / ordered scatter-add.
//
// Every sum is computed in the cpu's order, so the results have the cpu's bits (NaN payloads
// aside; -fmad=false keeps every product and sum separately rounded, as on the cpu):
//   - row sums: eight partials, element k into partial k % 8 in increasing k (threads 0..7 of
//     the row's block), folded as ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)) (nn_norm.cc);
//   - dw / db: a second kernel, one thread per column adding rows 0, 1, ... in order (no
//     atomics);
//   - embedding_backward: one thread per column walking ids i = 0 .. n - 1 in order.
// The price is parallelism: a row sum is 8-way parallel, a column sum and the scatter-add are
// sequential per column. Fine for the row counts of training (thousands); docs/gpu.md says what
// a faster version would change.
//
// Ids (embedding) live in device memory, so they are checked on the GPU and cannot throw: an id
// outside [0, num) gives a zero output row in forward and is skipped in backward (the cpu
// throws kOutOfRange; raising would need a host synchronisation).
#include <cstdint>

#include "braid/core/error.h"
#include "launch.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

constexpr int kNormThreads = 128;
constexpr int kParts = 8;

// sum_k f(k) over [0, d) as nn_norm.cc's row_sum; every thread of the block gets the result.
// smem: kParts values.
template <typename T, typename F>
__device__ inline T row_sum(int64_t d, T* smem, F&& f) {
  if (threadIdx.x < kParts) {
    T p = 0;
    for (int64_t k = threadIdx.x; k < d; k += kParts) p += f(k);
    smem[threadIdx.x] = p;
  }
  __syncthreads();
  const T r =
      ((smem[0] + smem[4]) + (smem[2] + smem[6])) + ((smem[1] + smem[5]) + (smem[3] + smem[7]));
  __syncthreads();
  return r;
}

template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    ln_forward_kernel(int64_t rows, int64_t d, const T* x, const T* w, const T* b, T eps, T* y,
                      T* mean, T* rstd) {
  __shared__ T smem[kParts];
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const T mu = row_sum<T>(d, smem, [&](int64_t k) { return xr[k]; }) * inv_d;
    const T var =
        row_sum<T>(d, smem, [&](int64_t k) { return (xr[k] - mu) * (xr[k] - mu); }) * inv_d;
    const T rs = T(1) / sqrt(var + eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t k = threadIdx.x; k < d; k += kNormThreads) {
      T v = (xr[k] - mu) * rs;
      if (w != nullptr) v = v * w[k];
      if (b != nullptr) v = v + b[k];
      yr[k] = v;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    ln_backward_dx_kernel(int64_t rows, int64_t d, const T* x, const T* w, const T* mean,
                          const T* rstd, const T* dy, T* dx) {
  __shared__ T smem[kParts];
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T mu = mean[r], rs = rstd[r];
    auto g = [&](int64_t k) { return w != nullptr ? dyr[k] * w[k] : dyr[k]; };
    auto xhat = [&](int64_t k) { return (xr[k] - mu) * rs; };
    const T mg = row_sum<T>(d, smem, g) * inv_d;
    const T mgx = row_sum<T>(d, smem, [&](int64_t k) { return g(k) * xhat(k); }) * inv_d;
    T* dxr = dx + r * d;
    for (int64_t k = threadIdx.x; k < d; k += kNormThreads) {
      dxr[k] = rs * (g(k) - mg - xhat(k) * mgx);
    }
  }
}

// dw[j] = sum_r dy * xhat, db[j] = sum_r dy, rows in order (mean null: RMSNorm, xhat = x rstd).
template <typename T>
__global__ void norm_columns_kernel(int64_t rows, int64_t d, const T* x, const T* mean,
                                    const T* rstd, const T* dy, T* dw, T* db) {
  for (int64_t j = detail::global_thread(); j < d; j += detail::grid_threads()) {
    T sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T g = dy[r * d + j];
      if (dw != nullptr) {
        const T xhat =
            mean != nullptr ? (x[r * d + j] - mean[r]) * rstd[r] : x[r * d + j] * rstd[r];
        sw += g * xhat;
      }
      if (db != nullptr) sb += g;
    }
    if (dw != nullptr) dw[j] = sw;
    if (db != nullptr) db[j] = sb;
  }
}

template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    rms_forward_kernel(int64_t rows, int64_t d, const T* x, const T* w, T eps, T* y, T* rstd) {
  __shared__ T smem[kParts];
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const T ms = row_sum<T>(d, smem, [&](int64_t k) { return xr[k] * xr[k]; }) * inv_d;
    const T rs = T(1) / sqrt(ms + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t k = threadIdx.x; k < d; k += kNormThreads) {
      yr[k] = w != nullptr ? xr[k] * rs * w[k] : xr[k] * rs;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    rms_backward_dx_kernel(int64_t rows, int64_t d, const T* x, const T* w, const T* rstd,
                           const T* dy, T* dx) {
  __shared__ T smem[kParts];
  const T inv_d = T(1) / static_cast<T>(d);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* dyr = dy + r * d;
    const T rs = rstd[r];
    auto g = [&](int64_t k) { return w != nullptr ? dyr[k] * w[k] : dyr[k]; };
    const T mgx = row_sum<T>(d, smem, [&](int64_t k) { return g(k) * (xr[k] * rs); }) * inv_d;
    T* dxr = dx + r * d;
    for (int64_t k = threadIdx.x; k < d; k += kNormThreads) {
      dxr[k] = rs * (g(k) - (xr[k] * rs) * mgx);
    }
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 30));
}

void check_norm_args(const char* name, DType dtype, int64_t rows, int64_t d) {
  BRAID_CHECK(rows >= 0 && d >= 0, kInvalidArgument, name, ": shape [rows ", rows, ", d ", d,
              "] must not be negative");
  BRAID_CHECK(dtype == DType::kF32 || dtype == DType::kF64, kNotSupported, name, ": dtype ", dtype,
              " is not supported; expected f32 or f64");
}

// fn(T{}) for f32 / f64 (checked before).
template <typename Fn>
void by_norm_dtype(DType dtype, Fn&& fn) {
  if (dtype == DType::kF64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// ---- embedding ----------------------------------------------------------------------------------

__device__ inline int64_t id_at(const void* ids, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
}

template <typename U>
__global__ void embedding_forward_kernel(int64_t num, int64_t dim, const U* weight, const void* ids,
                                         bool ids_i64, int64_t n, U* out) {
  for (int64_t e = detail::global_thread(); e < n * dim; e += detail::grid_threads()) {
    const int64_t i = e / dim, k = e % dim;
    const int64_t id = id_at(ids, ids_i64, i);
    out[e] = id >= 0 && id < num ? weight[id * dim + k] : U{};
  }
}

template <typename T>
__global__ void embedding_backward_kernel(int64_t num, int64_t dim, const void* ids, bool ids_i64,
                                          int64_t n, const T* dy, T* dweight) {
  for (int64_t k = detail::global_thread(); k < dim; k += detail::grid_threads()) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = id_at(ids, ids_i64, i);
      if (id >= 0 && id < num) dweight[id * dim + k] += dy[i * dim + k];
    }
  }
}

void check_embedding_args(const char* name, int64_t num, int64_t dim, DType id_dtype, int64_t n) {
  BRAID_CHECK(num >= 0 && dim >= 0 && n >= 0, kInvalidArgument, name, ": table [", num, ", ", dim,
              "] and id count ", n, " must not be negative");
  BRAID_CHECK(id_dtype == DType::kI64 || id_dtype == DType::kI32, kNotSupported, name,
              ": id dtype ", id_dtype, " is not supported; expected i64 or i32");
}

}  // namespace

void layer_norm_forward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                        const void* w, const void* b, double eps, void* y, void* mean, void* rstd) {
  check_norm_args("layer_norm_forward", dtype, rows, d);
  if (rows == 0) return;
  BRAID_CHECK(d > 0, kInvalidArgument, "layer_norm_forward: rows of length 0 have no mean");
  BRAID_CHECK(x != nullptr && y != nullptr && mean != nullptr && rstd != nullptr, kInvalidArgument,
              "layer_norm_forward: null x, y, mean or rstd");
  by_norm_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    ln_forward_kernel<T><<<row_blocks(rows), kNormThreads, 0, detail::stream_of(s)>>>(
        rows, d, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
        static_cast<T>(eps), static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
  });
  detail::check_launch("layer_norm_forward");
}

void layer_norm_backward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x,
                         const void* w, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dw, void* db) {
  check_norm_args("layer_norm_backward", dtype, rows, d);
  BRAID_CHECK(rows == 0 || (x != nullptr && mean != nullptr && rstd != nullptr && dy != nullptr),
              kInvalidArgument, "layer_norm_backward: null x, mean, rstd or dy");
  if (d == 0) return;
  const cudaStream_t st = detail::stream_of(s);
  by_norm_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto *px = static_cast<const T*>(x), *pm = static_cast<const T*>(mean);
    const auto *pr = static_cast<const T*>(rstd), *pdy = static_cast<const T*>(dy);
    if (dw != nullptr || db != nullptr) {  // rows == 0 writes zeros, as the cpu's memset
      norm_columns_kernel<T><<<detail::blocks_for(d), detail::kThreads, 0, st>>>(
          rows, d, px, pm, pr, pdy, static_cast<T*>(dw), static_cast<T*>(db));
    }
    if (dx != nullptr && rows > 0) {
      ln_backward_dx_kernel<T><<<row_blocks(rows), kNormThreads, 0, st>>>(
          rows, d, px, static_cast<const T*>(w), pm, pr, pdy, static_cast<T*>(dx));
    }
  });
  detail::check_launch("layer_norm_backward");
}

void rms_norm_forward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                      double eps, void* y, void* rstd) {
  check_norm_args("rms_norm_forward", dtype, rows, d);
  if (rows == 0) return;
  BRAID_CHECK(d > 0, kInvalidArgument, "rms_norm_forward: rows of length 0 have no mean square");
  BRAID_CHECK(x != nullptr && y != nullptr && rstd != nullptr, kInvalidArgument,
              "rms_norm_forward: null x, y or rstd");
  by_norm_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    rms_forward_kernel<T><<<row_blocks(rows), kNormThreads, 0, detail::stream_of(s)>>>(
        rows, d, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T>(eps),
        static_cast<T*>(y), static_cast<T*>(rstd));
  });
  detail::check_launch("rms_norm_forward");
}

void rms_norm_backward(Stream s, DType dtype, int64_t rows, int64_t d, const void* x, const void* w,
                       const void* rstd, const void* dy, void* dx, void* dw) {
  check_norm_args("rms_norm_backward", dtype, rows, d);
  BRAID_CHECK(rows == 0 || (x != nullptr && rstd != nullptr && dy != nullptr), kInvalidArgument,
              "rms_norm_backward: null x, rstd or dy");
  if (d == 0) return;
  const cudaStream_t st = detail::stream_of(s);
  by_norm_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto *px = static_cast<const T*>(x), *pr = static_cast<const T*>(rstd);
    const auto* pdy = static_cast<const T*>(dy);
    if (dw != nullptr) {
      norm_columns_kernel<T><<<detail::blocks_for(d), detail::kThreads, 0, st>>>(
          rows, d, px, nullptr, pr, pdy, static_cast<T*>(dw), nullptr);
    }
    if (dx != nullptr && rows > 0) {
      rms_backward_dx_kernel<T><<<row_blocks(rows), kNormThreads, 0, st>>>(
          rows, d, px, static_cast<const T*>(w), pr, pdy, static_cast<T*>(dx));
    }
  });
  detail::check_launch("rms_norm_backward");
}

void embedding_forward(Stream s, DType dtype, int64_t num, int64_t dim, const void* weight,
                       DType id_dtype, const void* ids, int64_t n, void* out) {
  check_embedding_args("embedding_forward", num, dim, id_dtype, n);
  if (n == 0) return;
  BRAID_CHECK(ids != nullptr && (dim == 0 || (weight != nullptr && out != nullptr)),
              kInvalidArgument, "embedding_forward: null weight, ids or out");
  if (dim == 0) return;
  const cudaStream_t st = detail::stream_of(s);
  const bool i64 = id_dtype == DType::kI64;
  const unsigned blocks = detail::blocks_for(n * dim);
  const auto launch = [&](auto word) {
    using U = decltype(word);
    embedding_forward_kernel<U><<<blocks, detail::kThreads, 0, st>>>(
        num, dim, static_cast<const U*>(weight), ids, i64, n, static_cast<U*>(out));
  };
  switch (dtype_size(dtype)) {
    case 1:
      launch(uint8_t{});
      break;
    case 2:
      launch(uint16_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    default:
      launch(uint64_t{});
      break;
  }
  detail::check_launch("embedding_forward");
}

void embedding_backward(Stream s, DType dtype, int64_t num, int64_t dim, DType id_dtype,
                        const void* ids, int64_t n, const void* dy, void* dweight) {
  check_embedding_args("embedding_backward", num, dim, id_dtype, n);
  BRAID_CHECK(dtype == DType::kF32 || dtype == DType::kF64, kNotSupported,
              "embedding_backward: dtype ", dtype, " is not supported; expected f32 or f64");
  if (n == 0) return;
  BRAID_CHECK(ids != nullptr && (dim == 0 || (dy != nullptr && dweight != nullptr)),
              kInvalidArgument, "embedding_backward: null ids, dy or dweight");
  if (dim == 0) return;
  const bool i64 = id_dtype == DType::kI64;
  by_norm_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T>
        <<<detail::blocks_for(dim), detail::kThreads, 0, detail::stream_of(s)>>>(
            num, dim, ids, i64, n, static_cast<const T*>(dy), static_cast<T*>(dweight));
  });
  detail::check_launch("embedding_backward");
}

}  // namespace braid::kernels::cuda::table_ops
