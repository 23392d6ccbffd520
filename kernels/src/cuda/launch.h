// What every kernel file of the cuda table shares: the stream of a braid::Stream, grid sizes
// for grid-stride loops (64-bit indices, any n), the post-launch check, dtype dispatch
// (runtime DType -> template argument), n-d index layouts with coalesced dimensions, and the
// fixed-shape block reduction that makes row sums reproducible (Note [Fixed reduction trees]).
// Included by .cu files only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "braid/core/device_runtime.h"
#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "runtime.h"
#include "vendor.h"

namespace braid::kernels::cuda::detail {

constexpr int kThreads = 256;
// Grid-stride kernels stop adding blocks here (gridDim.x may reach 2^31 - 1; past a few
// blocks per SM more blocks only cost scheduling).
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

inline cudaStream_t stream_of(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// After every launch: a bad configuration or a missing kernel image shows up here.
inline void check_launch(const char* op) {
  BRAID_CUDA_CHECK(op, cudaGetLastError());
}

// Grid-stride loop index helpers (device side).
__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

// fn(DTypeTag<d>{}) for d in f64, f32, f16, bf16; false (fn not called) for any other dtype.
template <typename Fn>
bool visit_float(DType d, Fn&& fn) {
  switch (d) {
    case DType::kF64:
      fn(DTypeTag<DType::kF64>{});
      return true;
    case DType::kF32:
      fn(DTypeTag<DType::kF32>{});
      return true;
    case DType::kF16:
      fn(DTypeTag<DType::kF16>{});
      return true;
    case DType::kBF16:
      fn(DTypeTag<DType::kBF16>{});
      return true;
    default:
      return false;
  }
}

// fn(DTypeTag<d>{}) for every dtype of the table.
template <typename Fn>
void visit_any(DType d, Fn&& fn) {
  switch (d) {
#define BRAID_VISIT_CASE(e, n, st, T, sz, fl) \
  case DType::e:                              \
    return fn(DTypeTag<DType::e>{});
    BRAID_FOR_EACH_DTYPE(BRAID_VISIT_CASE)
#undef BRAID_VISIT_CASE
  }
  BRAID_FAIL(kInvalidArgument, "dtype value ", static_cast<int>(d), " is not a DType");
}

// ---- n-d layouts ----------------------------------------------------------------------------

// At most this many dimensions after coalescing (size-1 dimensions dropped, neighbours merged
// where every operand walks them densely). More throws kNotSupported naming the kernel.
constexpr int kMaxDims = 12;

// A row-major index space and up to two operands' element strides, passed by value.
struct NdLayout {
  int rank = 0;
  int64_t count = 1;  // elements in all
  int64_t shape[kMaxDims] = {};
  int64_t stride[2][kMaxDims] = {};
};

// Coalesces `shape` for `nops` (1 or 2) stride arrays. count == 0 when any dimension is 0.
inline NdLayout coalesce(const char* op, int ndim, const int64_t* shape, const int64_t* s0,
                         const int64_t* s1) {
  BRAID_CHECK(ndim >= 0, kInvalidArgument, op, ": ndim ", ndim, " must be >= 0");
  BRAID_CHECK(ndim == 0 || (shape && s0), kInvalidArgument, op, ": ndim ", ndim,
              " with a null shape or strides pointer");
  NdLayout l;
  const int64_t* strides[2] = {s0, s1};
  const int nops = s1 ? 2 : 1;
  for (int d = 0; d < ndim; ++d) {
    BRAID_CHECK(shape[d] >= 0, kInvalidArgument, op, ": shape[", d, "] = ", shape[d],
                " must be >= 0");
    l.count *= shape[d];
  }
  if (l.count == 0) return l;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool merge = l.rank > 0;
    for (int k = 0; k < nops && merge; ++k) {
      merge = l.stride[k][l.rank - 1] == strides[k][d] * shape[d];
    }
    if (merge) {
      l.shape[l.rank - 1] *= shape[d];
      for (int k = 0; k < nops; ++k) l.stride[k][l.rank - 1] = strides[k][d];
      continue;
    }
    BRAID_CHECK(l.rank < kMaxDims, kNotSupported, op, ": more than ", kMaxDims,
                " dimensions remain after merging dense ones (ndim ", ndim, ") on cuda");
    l.shape[l.rank] = shape[d];
    for (int k = 0; k < nops; ++k) l.stride[k][l.rank] = strides[k][d];
    ++l.rank;
  }
  return l;
}

// The element offsets of row-major index i in operand 0 and 1.
__device__ inline void nd_offsets(const NdLayout& l, int64_t i, int64_t& o0, int64_t& o1) {
  o0 = 0;
  o1 = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t idx = i % l.shape[d];
    i /= l.shape[d];
    o0 += idx * l.stride[0][d];
    o1 += idx * l.stride[1][d];
  }
}

// ---- reductions -------------------------------------------------------------------------------

// Note [Fixed reduction trees]: floating-point sums on the GPU never use atomics. Thread t of a
// block accumulates elements t, t + B, t + 2B, ... in order, then the B partials are folded by
// halving (t combines with t + h for h = B/2, ..., 1) in shared memory. B is a compile-time
// constant of each kernel, so the order depends on neither the launch timing nor the GPU: every
// run gives the same bits.

// Folds v (one per thread of a block of kB threads, kB a power of two) with `op`; every thread
// gets the result. `smem` holds kB values; it may be reused after the call.
template <int kB, typename T, typename Op>
__device__ inline T block_fold(T v, T* smem, Op op) {
  static_assert((kB & (kB - 1)) == 0, "block size must be a power of two");
  const int t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
#pragma unroll
  for (int h = kB / 2; h >= 1; h /= 2) {
    if (t < h) smem[t] = op(smem[t], smem[t + h]);
    __syncthreads();
  }
  const T r = smem[0];
  __syncthreads();
  return r;
}

// Max / min that propagate NaN (torch.amax): x wins when it is greater or NaN.
template <typename T>
__device__ inline T max_nan(T acc, T x) {
  return (x > acc || x != x) ? x : acc;
}

}  // namespace braid::kernels::cuda::detail
