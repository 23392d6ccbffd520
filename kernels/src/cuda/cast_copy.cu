// Data movement of the cuda kernel table: cast (every pair of the 12 dtypes, cast_math.h's
// rules, bit-identical to the cpu), fill (the value converted on the host exactly as the cpu
// converts it, then replicated) and the strided gather / scatter copies (n-d, any element size:
// 1, 2, 4, 8 and 16 bytes move as one word when aligned, other sizes byte by byte).
// Grid-stride loops over 64-bit indices, so any count fits one launch.
#include <cstdint>
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"
#include "cast_math.h"
#include "launch.h"
#include "table_ops.h"

namespace braid::kernels::cuda::table_ops {
namespace {

using detail::DTypeTag;
using math::Bits;

template <DType S, DType D, bool kSaturate>
__global__ void cast_kernel(const Bits<S>* src, Bits<D>* dst, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) {
    dst[i] = math::convert<D, S, kSaturate>(src[i]);
  }
}

template <typename U>
__global__ void fill_kernel(U* dst, int64_t n, U value) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_threads()) dst[i] = value;
}

// dst[i] = src[offset(i)] (gather) or dst[offset(i)] = src[i] (scatter), in units of U.
template <typename U, bool kScatter>
__global__ void strided_kernel(const U* src, U* dst, detail::NdLayout l) {
  for (int64_t i = detail::global_thread(); i < l.count; i += detail::grid_threads()) {
    int64_t off, unused;
    detail::nd_offsets(l, i, off, unused);
    if constexpr (kScatter) {
      dst[off] = src[i];
    } else {
      dst[i] = src[off];
    }
  }
}

// Elements of any size, byte by byte.
template <bool kScatter>
__global__ void strided_bytes_kernel(const uint8_t* src, uint8_t* dst, int64_t esize,
                                     detail::NdLayout l) {
  for (int64_t i = detail::global_thread(); i < l.count; i += detail::grid_threads()) {
    int64_t off, unused;
    detail::nd_offsets(l, i, off, unused);
    const uint8_t* s = src + (kScatter ? i : off) * esize;
    uint8_t* d = dst + (kScatter ? off : i) * esize;
    for (int64_t b = 0; b < esize; ++b) d[b] = s[b];
  }
}

bool overlaps(const void* a, const void* b, int64_t bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(bytes) && pb < pa + static_cast<uintptr_t>(bytes);
}

// Same dtype: a copy; src and dst may overlap (as memmove), through a temporary then.
void copy_same(const void* src, void* dst, int64_t bytes, cudaStream_t st) {
  constexpr const char* kOp = "cast";
  if (src == dst) return;
  if (!overlaps(src, dst, bytes)) {
    BRAID_CUDA_CHECK(
        kOp, cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, st));
    return;
  }
  detail::StreamBuffer tmp(kOp, static_cast<size_t>(bytes), st);
  BRAID_CUDA_CHECK(kOp, cudaMemcpyAsync(tmp.get(), src, static_cast<size_t>(bytes),
                                        cudaMemcpyDeviceToDevice, st));
  BRAID_CUDA_CHECK(kOp, cudaMemcpyAsync(dst, tmp.get(), static_cast<size_t>(bytes),
                                        cudaMemcpyDeviceToDevice, st));
  tmp.release(kOp);
}

template <typename U, bool kScatter>
void launch_strided(const char* op, const void* src, void* dst, const detail::NdLayout& l,
                    cudaStream_t st) {
  strided_kernel<U, kScatter><<<detail::blocks_for(l.count), detail::kThreads, 0, st>>>(
      static_cast<const U*>(src), static_cast<U*>(dst), l);
  detail::check_launch(op);
}

template <bool kScatter>
void strided_copy(const char* op, Stream s, const void* src, int64_t elem_size, int ndim,
                  const int64_t* shape, const int64_t* strides, void* dst) {
  BRAID_CHECK(elem_size > 0, kInvalidArgument, op, ": element size ", elem_size,
              " must be positive");
  const detail::NdLayout l = detail::coalesce(op, ndim, shape, strides, nullptr);
  if (l.count == 0) return;
  BRAID_CHECK(src != nullptr && dst != nullptr, kInvalidArgument, op, ": null ",
              src == nullptr ? "src" : "dst", " pointer for ", l.count, " elements");
  const cudaStream_t st = detail::stream_of(s);
  const auto aligned = [&](int64_t a) {
    return reinterpret_cast<uintptr_t>(src) % a == 0 && reinterpret_cast<uintptr_t>(dst) % a == 0;
  };
  if (elem_size <= 16 && (elem_size & (elem_size - 1)) == 0 && aligned(elem_size)) {
    switch (elem_size) {
      case 1:
        return launch_strided<uint8_t, kScatter>(op, src, dst, l, st);
      case 2:
        return launch_strided<uint16_t, kScatter>(op, src, dst, l, st);
      case 4:
        return launch_strided<uint32_t, kScatter>(op, src, dst, l, st);
      case 8:
        return launch_strided<uint64_t, kScatter>(op, src, dst, l, st);
      default:
        return launch_strided<uint4, kScatter>(op, src, dst, l, st);
    }
  }
  strided_bytes_kernel<kScatter><<<detail::blocks_for(l.count), detail::kThreads, 0, st>>>(
      static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), elem_size, l);
  detail::check_launch(op);
}

}  // namespace

void cast(Stream s, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
          CastMode mode) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "cast: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(src != nullptr && dst != nullptr, kInvalidArgument, "cast: ", n, " elements from ",
              src_dtype, " to ", dst_dtype, " with a null ", src == nullptr ? "src" : "dst",
              " pointer");
  const cudaStream_t st = detail::stream_of(s);
  if (src_dtype == dst_dtype) {
    return copy_same(src, dst, n * static_cast<int64_t>(dtype_size(src_dtype)), st);
  }
  const bool saturate = mode == CastMode::kSaturate;
  detail::visit_any(src_dtype, [&](auto stag) {
    detail::visit_any(dst_dtype, [&](auto dtag) {
      constexpr DType S = decltype(stag)::value, D = decltype(dtag)::value;
      constexpr bool kFp8 = D == DType::kF8E4M3 || D == DType::kF8E5M2;
      const auto* sp = static_cast<const Bits<S>*>(src);
      auto* dp = static_cast<Bits<D>*>(dst);
      if (kFp8 && saturate) {
        cast_kernel<S, D, kFp8><<<detail::blocks_for(n), detail::kThreads, 0, st>>>(sp, dp, n);
      } else {
        cast_kernel<S, D, false><<<detail::blocks_for(n), detail::kThreads, 0, st>>>(sp, dp, n);
      }
    });
  });
  detail::check_launch("cast");
}

void fill(Stream s, void* dst, DType dtype, int64_t n, double value) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "fill: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(dst != nullptr, kInvalidArgument, "fill: ", n, " elements of ", dtype,
              " into a null pointer");
  // One element converted on the host exactly as the cpu's fill converts it.
  alignas(8) unsigned char pattern[8] = {};
  cpu::cast(&value, DType::kF64, pattern, dtype, 1);
  const size_t esize = dtype_size(dtype);
  const cudaStream_t st = detail::stream_of(s);
  bool bytes_equal = true;
  for (size_t b = 1; b < esize; ++b) bytes_equal &= pattern[b] == pattern[0];
  if (bytes_equal) {  // 0, -1, any 1-byte dtype: a memset
    BRAID_CUDA_CHECK("fill", cudaMemsetAsync(dst, pattern[0], static_cast<size_t>(n) * esize, st));
    return;
  }
  const auto launch = [&](auto word) {
    using U = decltype(word);
    U v;
    std::memcpy(&v, pattern, sizeof(U));
    fill_kernel<U><<<detail::blocks_for(n), detail::kThreads, 0, st>>>(static_cast<U*>(dst), n, v);
  };
  switch (esize) {
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
  detail::check_launch("fill");
}

void copy_strided(Stream s, const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                  const int64_t* src_strides, void* dst) {
  strided_copy<false>("copy_strided", s, src, elem_size, ndim, shape, src_strides, dst);
}

void copy_to_strided(Stream s, const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                     void* dst, const int64_t* dst_strides) {
  strided_copy<true>("copy_to_strided", s, src, elem_size, ndim, shape, dst_strides, dst);
}

}  // namespace braid::kernels::cuda::table_ops
