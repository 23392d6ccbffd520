// The quantization members of the cuda kernel table (table.h; cpu_quant.h is the reference):
// bitsandbytes' 4-bit and 8-bit block-wise codes, LLM.int8's row-wise int8 and its int8 GEMM, and
// the fused 4-bit dequant-GEMM. Correct first, not tuned: one block per quantization block or
// row, one thread per output of the int8 GEMM, one 16-thread group per output of gemm_4bit.
//
// Bits. Block and row maxima are exact (max does not round), the codes come from the cpu's trees
// and search (quant_math.h, checked on the host), the products code * absmax and the int8 scale
// are the same f32 operations (-fmad=false), and int32 sums are exact: every result but the
// outlier and fused sums has the cpu's bits by construction. gemm_4bit keeps the cpu's order
// (Note [gemm_4bit order] in kernels/src/cpu/quant.cc): thread l of a 16-thread group is lane l,
// fmaf over p = l, l + 16, ... (zero-padded), then the lanes folded 8, 4, 2, 1 by shuffles, so
// it has the cpu's bits too. int8_linear's outlier columns are added in the cpu's order.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "braid/core/error.h"
#include "launch.h"
#include "quant_math.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using detail::blocks_for;
using detail::check_launch;
using detail::global_thread;
using detail::grid_threads;
using detail::stream_of;

constexpr int kQThreads = 256;

void check_block(const char* op, const void* a, const void* b, const void* c, int64_t n,
                 int64_t blocksize) {
  BRAID_CHECK(n >= 0, kInvalidArgument, op, ": count ", n, " is negative");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, op, ": blocksize ", blocksize,
              " must be positive and even");
  BRAID_CHECK(n == 0 || (a && b && c), kInvalidArgument, op, ": null pointer with count ", n);
}

// max |x| over [begin, end) of one block of threads (NaN skipped, as std::max(m, NaN) skips it).
__device__ float block_absmax(const float* x, int64_t begin, int64_t end, float* smem) {
  float m = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) m = fmaxf(m, fabsf(x[i]));
  return detail::block_fold<kQThreads>(m, smem, [](float a, float b) { return fmaxf(a, b); });
}

// One block of threads per quantization block: the absmax, then one byte (two codes) per thread.
__global__ void __launch_bounds__(kQThreads)
    quantize_4bit_kernel(bool nf4, const float* x, int64_t n, int64_t bs, uint8_t* packed,
                         float* absmax) {
  __shared__ float smem[kQThreads];
  const int64_t blocks = (n + bs - 1) / bs;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t b0 = b * bs, end = n < b0 + bs ? n : b0 + bs;
    const float m = block_absmax(x, b0, end, smem);
    if (threadIdx.x == 0) absmax[b] = m;
    const float inv = 1.0f / m;
    for (int64_t e = b0 + 2 * threadIdx.x; e < end; e += 2 * blockDim.x) {
      const float v0 = x[e] * inv;
      const uint8_t hi = nf4 ? math::quantize_nf4(v0) : math::quantize_fp4(v0);
      uint8_t lo = 0;
      if (e + 1 < end) {
        const float v1 = x[e + 1] * inv;
        lo = nf4 ? math::quantize_nf4(v1) : math::quantize_fp4(v1);
      }
      packed[e / 2] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
}

__global__ void dequantize_4bit_kernel(const float* code, const uint8_t* packed,
                                       const float* absmax, int64_t n, int64_t bs, float* y) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    y[i] = code[math::nibble(packed, i)] * absmax[i / bs];
  }
}

__global__ void __launch_bounds__(kQThreads)
    quantize_8bit_kernel(const float* code, const float* x, int64_t n, int64_t bs, uint8_t* q,
                         float* absmax) {
  __shared__ float smem[kQThreads];
  const int64_t blocks = (n + bs - 1) / bs;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t b0 = b * bs, end = n < b0 + bs ? n : b0 + bs;
    const float m = block_absmax(x, b0, end, smem);
    if (threadIdx.x == 0) absmax[b] = m;
    const float inv = 1.0f / m;
    for (int64_t e = b0 + threadIdx.x; e < end; e += blockDim.x) {
      q[e] = math::quantize_dynamic(code, x[e] * inv);
    }
  }
}

__global__ void dequantize_8bit_kernel(const float* code, const uint8_t* q, const float* absmax,
                                       int64_t n, int64_t bs, float* y) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = code[q[i]] * absmax[i / bs];
}

// One block per row: the absmax of the elements below the threshold, the outlier columns flagged
// (every writer stores 1), then the row quantized.
__global__ void __launch_bounds__(kQThreads)
    int8_rows_kernel(const float* x, int64_t rows, int64_t cols, float threshold, int8_t* q,
                     float* absmax, uint8_t* outlier) {
  __shared__ float smem[kQThreads];
  const bool decompose = threshold > 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float m = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float a = fabsf(xr[c]);
      if (decompose && a >= threshold) {
        outlier[c] = 1;
      } else {
        m = fmaxf(m, a);
      }
    }
    m = detail::block_fold<kQThreads>(m, smem, [](float a, float b) { return fmaxf(a, b); });
    if (threadIdx.x == 0) absmax[r] = m;
    const float scale = m > 0 ? 127.0f / m : 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      q[r * cols + c] = math::quantize_int8(xr[c], scale);
    }
  }
}

__global__ void zero_columns_kernel(int8_t* q, int64_t rows, int64_t cols, const int64_t* which,
                                    int64_t count) {
  for (int64_t i = global_thread(); i < rows * count; i += grid_threads()) {
    q[(i / count) * cols + which[i % count]] = 0;
  }
}

__global__ void gemm_i8_kernel(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                               int32_t* c) {
  for (int64_t o = global_thread(); o < m * n; o += grid_threads()) {
    const int8_t* ar = a + (o / n) * k;
    const int8_t* br = b + (o % n) * k;
    int32_t acc = 0;
    for (int64_t p = 0; p < k; ++p) acc += int32_t{ar[p]} * int32_t{br[p]};
    c[o] = acc;
  }
}

// int8_mm_dequant's rescale, then the outlier columns against W's dequantized columns, in the
// cpu's order and operations.
__global__ void int8_linear_kernel(const int32_t* acc, const float* sx, const float* scb,
                                   const float* x, const int8_t* cb, const int64_t* outliers,
                                   int64_t n_out, int64_t m, int64_t n, int64_t k, float* y) {
  for (int64_t o = global_thread(); o < m * n; o += grid_threads()) {
    const int64_t i = o / n, j = o % n;
    float v = static_cast<float>(acc[o]) * (sx[i] * scb[j]) * 6.200124e-05f;
    for (int64_t t = 0; t < n_out; ++t) {
      const int64_t c = outliers[t];
      v += x[i * k + c] * (static_cast<float>(cb[j * k + c]) * scb[j] / 127.0f);
    }
    y[o] = v;
  }
}

// 16 threads per output y[i, j]: thread l is lane l of Note [gemm_4bit order], dequantizing its
// weights in registers (code[q] * absmax, the cpu's product).
constexpr int kLanes = 16;
__global__ void __launch_bounds__(kQThreads)
    gemm_4bit_kernel(const float* code, const uint8_t* packed, const float* absmax, int64_t bs,
                     int64_t m, int64_t n, int64_t k, const float* x, float* y) {
  __shared__ float table[16];
  if (threadIdx.x < 16 && code) table[threadIdx.x] = code[threadIdx.x];
  __syncthreads();
  const int lane = threadIdx.x % kLanes;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * (blockDim.x / kLanes);
  const int64_t steps = (k + kLanes - 1) / kLanes;
  // Every thread of a warp runs the same number of iterations (m * n is covered group by
  // group, and a group never straddles warps), so the full-mask shuffles below are safe.
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const int64_t total = m * n;
  const int64_t rounds = (total + groups - 1) / groups;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t o = first + round * groups;
    const bool live = o < total;
    float s = 0.0f;
    if (live) {
      const int64_t i = o / n, j = o % n;
      const float* xr = x + i * k;
      const int64_t w0 = j * k;
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t p = t * kLanes + lane;
        float xv = 0.0f, wv = 0.0f;
        if (p < k) {
          xv = xr[p];
          wv = table[math::nibble(packed, w0 + p)] * absmax[(w0 + p) / bs];
        }
        s = fmaf(xv, wv, s);
      }
    }
    // s[l] + s[l + 8], then + 4, + 2, + 1: lane 0 ends with the cpu's fold.
#pragma unroll
    for (int width = 8; width >= 1; width /= 2) s = s + BRAID_SHFL_DOWN(s, width, 16);
    if (live && lane == 0) y[o] = s;
  }
}

// One thread per y[i, p]: j = 0..n-1 in order, fmaf(x[i, j], W[j, p], acc) from 0, the cpu's
// sequential sum (gemm_4bit_nn in cpu_quant.h).
__global__ void gemm_4bit_nn_kernel(const float* code, const uint8_t* packed, const float* absmax,
                                    int64_t bs, int64_t m, int64_t n, int64_t k, const float* x,
                                    float* y) {
  for (int64_t o = global_thread(); o < m * k; o += grid_threads()) {
    const int64_t i = o / k, p = o % k;
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t e = j * k + p;
      acc = fmaf(x[i * n + j], code[math::nibble(packed, e)] * absmax[e / bs], acc);
    }
    y[o] = acc;
  }
}

bool is_gemm4_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

}  // namespace

void quantize_4bit(Stream s, Quant4Type type, const float* x, int64_t n, int64_t blocksize,
                   uint8_t* packed, float* absmax) {
  check_block("quantize_4bit", x, packed, absmax, n, blocksize);
  if (n == 0) return;
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  quantize_4bit_kernel<<<blocks_for(blocks, 1), kQThreads, 0, stream_of(s)>>>(
      type == Quant4Type::kNf4, x, n, blocksize, packed, absmax);
  check_launch("quantize_4bit");
}

void dequantize_4bit(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                     int64_t n, int64_t blocksize, float* y) {
  check_block("dequantize_4bit", packed, absmax, y, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "dequantize_4bit: null code table");
  if (n == 0) return;
  dequantize_4bit_kernel<<<blocks_for(n), detail::kThreads, 0, stream_of(s)>>>(code, packed, absmax,
                                                                               n, blocksize, y);
  check_launch("dequantize_4bit");
}

void quantize_blockwise_8bit(Stream s, const float* code, const float* x, int64_t n,
                             int64_t blocksize, uint8_t* q, float* absmax) {
  check_block("quantize_blockwise_8bit", x, q, absmax, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "quantize_blockwise_8bit: null code table");
  if (n == 0) return;
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  quantize_8bit_kernel<<<blocks_for(blocks, 1), kQThreads, 0, stream_of(s)>>>(code, x, n, blocksize,
                                                                              q, absmax);
  check_launch("quantize_blockwise_8bit");
}

void dequantize_blockwise_8bit(Stream s, const float* code, const uint8_t* q, const float* absmax,
                               int64_t n, int64_t blocksize, float* y) {
  check_block("dequantize_blockwise_8bit", q, absmax, y, n, blocksize);
  BRAID_CHECK(n == 0 || code, kInvalidArgument, "dequantize_blockwise_8bit: null code table");
  if (n == 0) return;
  dequantize_8bit_kernel<<<blocks_for(n), detail::kThreads, 0, stream_of(s)>>>(code, q, absmax, n,
                                                                               blocksize, y);
  check_launch("dequantize_blockwise_8bit");
}

int64_t quantize_int8_rows(Stream s, const float* x, int64_t rows, int64_t cols, float threshold,
                           int8_t* q, float* absmax, int64_t* outlier_cols) {
  BRAID_CHECK(rows >= 0 && cols >= 0, kInvalidArgument, "quantize_int8_rows: negative size (rows ",
              rows, ", cols ", cols, ")");
  BRAID_CHECK(threshold >= 0, kInvalidArgument, "quantize_int8_rows: threshold ", threshold,
              " is negative (0 turns outliers off)");
  BRAID_CHECK(rows * cols == 0 || (x && q && absmax), kInvalidArgument,
              "quantize_int8_rows: null pointer");
  const bool decompose = threshold > 0;
  BRAID_CHECK(!decompose || rows * cols == 0 || outlier_cols, kInvalidArgument,
              "quantize_int8_rows: threshold ", threshold, " needs an outlier_cols buffer");
  if (rows == 0) return 0;
  const cudaStream_t st = stream_of(s);
  detail::StreamBuffer flags("quantize_int8_rows", decompose ? static_cast<size_t>(cols) : 0, st);
  auto* flag = static_cast<uint8_t*>(flags.get());
  if (decompose && cols > 0) {
    BRAID_CUDA_CHECK("quantize_int8_rows", cudaMemsetAsync(flag, 0, static_cast<size_t>(cols), st));
  }
  if (cols > 0) {
    int8_rows_kernel<<<blocks_for(rows, 1), kQThreads, 0, st>>>(x, rows, cols, threshold, q, absmax,
                                                                flag);
    check_launch("quantize_int8_rows");
  }
  if (!decompose || cols == 0) return 0;
  // The count is a host value: wait for the flags, list the columns in order, zero them.
  std::vector<uint8_t> host(static_cast<size_t>(cols));
  BRAID_CUDA_CHECK("quantize_int8_rows",
                   cudaMemcpyAsync(host.data(), flag, host.size(), cudaMemcpyDeviceToHost, st));
  BRAID_CUDA_CHECK("quantize_int8_rows", cudaStreamSynchronize(st));
  std::vector<int64_t> which;
  for (int64_t c = 0; c < cols; ++c) {
    if (host[c]) which.push_back(c);
  }
  const auto count = static_cast<int64_t>(which.size());
  if (count > 0) {
    BRAID_CUDA_CHECK("quantize_int8_rows",
                     cudaMemcpyAsync(outlier_cols, which.data(), which.size() * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, st));
    zero_columns_kernel<<<blocks_for(rows * count), detail::kThreads, 0, st>>>(q, rows, cols,
                                                                               outlier_cols, count);
    check_launch("quantize_int8_rows");
    // `which` is pageable host memory: the copy has read it once the stream gets here.
    BRAID_CUDA_CHECK("quantize_int8_rows", cudaStreamSynchronize(st));
  }
  return count;
}

void gemm_i8_i32(Stream s, const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k,
                 int32_t* c) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_i8_i32: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(k < 133000, kNotSupported, "gemm_i8_i32: k ", k,
              " could overflow the int32 accumulator (expected k < 133000)");
  BRAID_CHECK(m * n == 0 || (a && b && c), kInvalidArgument, "gemm_i8_i32: null pointer");
  if (m * n == 0) return;
  gemm_i8_kernel<<<blocks_for(m * n), detail::kThreads, 0, stream_of(s)>>>(a, b, m, n, k, c);
  check_launch("gemm_i8_i32");
}

int64_t int8_linear(Stream s, const float* x, int64_t m, int64_t k, const int8_t* cb,
                    const float* scb, int64_t n, float threshold, float* y) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "int8_linear: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(threshold >= 0, kInvalidArgument, "int8_linear: threshold ", threshold,
              " is negative");
  BRAID_CHECK(k < 133000, kNotSupported, "gemm_i8_i32: k ", k,
              " could overflow the int32 accumulator (expected k < 133000)");
  if (m * n == 0 && m * k == 0) return 0;
  const cudaStream_t st = stream_of(s);
  detail::StreamBuffer qx("int8_linear", static_cast<size_t>(m * k), st);
  detail::StreamBuffer sx("int8_linear", static_cast<size_t>(m) * sizeof(float), st);
  detail::StreamBuffer cols("int8_linear", static_cast<size_t>(k) * sizeof(int64_t), st);
  detail::StreamBuffer acc("int8_linear", static_cast<size_t>(m * n) * sizeof(int32_t), st);
  const int64_t n_out =
      quantize_int8_rows(s, x, m, k, threshold, static_cast<int8_t*>(qx.get()),
                         static_cast<float*>(sx.get()), static_cast<int64_t*>(cols.get()));
  if (m * n == 0) return n_out;
  gemm_i8_i32(s, static_cast<const int8_t*>(qx.get()), cb, m, n, k,
              static_cast<int32_t*>(acc.get()));
  int8_linear_kernel<<<blocks_for(m * n), detail::kThreads, 0, st>>>(
      static_cast<const int32_t*>(acc.get()), static_cast<const float*>(sx.get()), scb, x, cb,
      static_cast<const int64_t*>(cols.get()), n_out, m, n, k, y);
  check_launch("int8_linear");
  return n_out;
}

void gemm_4bit(Stream s, const float* code, const uint8_t* packed, const float* absmax,
               int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype,
               void* y, DType y_dtype) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_4bit: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, "gemm_4bit: blocksize ",
              blocksize, " must be positive and even");
  BRAID_CHECK(is_gemm4_dtype(x_dtype) && is_gemm4_dtype(y_dtype), kNotSupported,
              "gemm_4bit: dtypes x ", x_dtype, ", y ", y_dtype, " (expected f32, bf16 or f16)");
  if (m * n == 0) return;
  BRAID_CHECK(y && (k == 0 || (code && packed && absmax && x)), kInvalidArgument,
              "gemm_4bit: null pointer");
  const cudaStream_t st = stream_of(s);
  // x widened and y rounded by the table's cast (the cpu's conversions, bit for bit).
  detail::StreamBuffer x32("gemm_4bit", x_dtype == DType::kF32 ? 0 : m * k * sizeof(float), st);
  detail::StreamBuffer y32("gemm_4bit", y_dtype == DType::kF32 ? 0 : m * n * sizeof(float), st);
  const float* xf = static_cast<const float*>(x);
  if (x_dtype != DType::kF32 && k > 0) {
    cast(s, x, x_dtype, x32.get(), DType::kF32, m * k, CastMode::kDefault);
    xf = static_cast<const float*>(x32.get());
  }
  float* yf = y_dtype == DType::kF32 ? static_cast<float*>(y) : static_cast<float*>(y32.get());
  const int64_t groups = m * n;
  const int64_t per_block = kQThreads / kLanes;
  gemm_4bit_kernel<<<blocks_for(groups, per_block), kQThreads, 0, st>>>(code, packed, absmax,
                                                                        blocksize, m, n, k, xf, yf);
  check_launch("gemm_4bit");
  if (y_dtype != DType::kF32) cast(s, yf, DType::kF32, y, y_dtype, m * n, CastMode::kDefault);
}

}  // namespace braid::kernels::cuda::table_ops

namespace braid::kernels::cuda::table_ops {

void gemm_4bit_nn(Stream s, const float* code, const uint8_t* packed, const float* absmax,
                  int64_t blocksize, int64_t m, int64_t n, int64_t k, const void* x, DType x_dtype,
                  void* y, DType y_dtype) {
  BRAID_CHECK(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, "gemm_4bit_nn: negative size (m ", m,
              ", n ", n, ", k ", k, ")");
  BRAID_CHECK(blocksize > 0 && blocksize % 2 == 0, kInvalidArgument, "gemm_4bit_nn: blocksize ",
              blocksize, " must be positive and even");
  BRAID_CHECK(is_gemm4_dtype(x_dtype) && is_gemm4_dtype(y_dtype), kNotSupported,
              "gemm_4bit_nn: dtypes x ", x_dtype, ", y ", y_dtype, " (expected f32, bf16 or f16)");
  if (m * k == 0) return;
  BRAID_CHECK(y && (n == 0 || (code && packed && absmax && x)), kInvalidArgument,
              "gemm_4bit_nn: null pointer");
  const cudaStream_t st = stream_of(s);
  detail::StreamBuffer x32("gemm_4bit_nn", x_dtype == DType::kF32 ? 0 : m * n * sizeof(float), st);
  detail::StreamBuffer y32("gemm_4bit_nn", y_dtype == DType::kF32 ? 0 : m * k * sizeof(float), st);
  const float* xf = static_cast<const float*>(x);
  if (x_dtype != DType::kF32 && n > 0) {
    cast(s, x, x_dtype, x32.get(), DType::kF32, m * n, CastMode::kDefault);
    xf = static_cast<const float*>(x32.get());
  }
  float* yf = y_dtype == DType::kF32 ? static_cast<float*>(y) : static_cast<float*>(y32.get());
  gemm_4bit_nn_kernel<<<blocks_for(m * k), detail::kThreads, 0, st>>>(code, packed, absmax,
                                                                      blocksize, m, n, k, xf, yf);
  check_launch("gemm_4bit_nn");
  if (y_dtype != DType::kF32) cast(s, yf, DType::kF32, y, y_dtype, m * k, CastMode::kDefault);
}

}  // namespace braid::kernels::cuda::table_ops
