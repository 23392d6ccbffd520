// Data movement that needs no SIMD level of its own: strided gather / scatter (memcpy of the
// innermost contiguous run when there is one) and fill (one element converted as cast()
// does, then replicated; std::fill_n compiles to wide stores); and the non-temporal copy, whose
// SSE2 streaming stores are part of the x86-64 baseline.
#include <algorithm>
#include <cstring>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace braid::kernels::cpu {
namespace {

// Walks an n-d index space in row-major order, calling fn(src_offset, count) for each run of
// the innermost dimension. Offsets are in elements.
template <typename Fn>
void for_each_row(int ndim, const int64_t* shape, const int64_t* strides, Fn&& fn) {
  if (ndim == 0) {
    fn(int64_t{0}, int64_t{1});
    return;
  }
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return;
  }
  const int64_t inner = shape[ndim - 1];
  std::vector<int64_t> index(ndim > 1 ? ndim - 1 : 1, 0);
  int64_t offset = 0;
  while (true) {
    fn(offset, inner);
    int d = ndim - 2;
    for (; d >= 0; --d) {
      ++index[d];
      offset += strides[d];
      if (index[d] < shape[d]) break;
      offset -= strides[d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

void copy_run(char* dst, int64_t dst_stride, const char* src, int64_t src_stride, int64_t count,
              int64_t elem) {
  if (dst_stride == 1 && src_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(count * elem));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(dst + i * dst_stride * elem, src + i * src_stride * elem,
                static_cast<size_t>(elem));
  }
}

}  // namespace

void copy_strided(const void* src, int64_t elem_size, int ndim, const int64_t* shape,
                  const int64_t* src_strides, void* dst) {
  BRAID_CHECK(elem_size > 0, kInvalidArgument, "copy_strided: element size ", elem_size,
              " must be positive");
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const int64_t inner_stride = ndim > 0 ? src_strides[ndim - 1] : 1;
  for_each_row(ndim, shape, src_strides, [&](int64_t offset, int64_t count) {
    copy_run(d, 1, s + offset * elem_size, inner_stride, count, elem_size);
    d += count * elem_size;
  });
}

void copy_to_strided(const void* src, int64_t elem_size, int ndim, const int64_t* shape, void* dst,
                     const int64_t* dst_strides) {
  BRAID_CHECK(elem_size > 0, kInvalidArgument, "copy_to_strided: element size ", elem_size,
              " must be positive");
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const int64_t inner_stride = ndim > 0 ? dst_strides[ndim - 1] : 1;
  for_each_row(ndim, shape, dst_strides, [&](int64_t offset, int64_t count) {
    copy_run(d + offset * elem_size, inner_stride, s, 1, count, elem_size);
    s += count * elem_size;
  });
}

namespace {

template <class U>
void fill_pattern(void* dst, int64_t n, const unsigned char* pattern) {
  U v;
  std::memcpy(&v, pattern, sizeof(U));
  std::fill_n(static_cast<U*>(dst), n, v);
}

}  // namespace

void fill(void* dst, DType dtype, int64_t n, double value) {
  BRAID_CHECK(n >= 0, kInvalidArgument, "fill: element count ", n, " must be >= 0");
  if (n == 0) return;
  BRAID_CHECK(dst != nullptr, kInvalidArgument, "fill: ", n, " elements of ", dtype,
              " into a null pointer");
  // One element converted exactly as cast() converts f64, then replicated.
  alignas(8) unsigned char pattern[8] = {};
  cast(&value, DType::kF64, pattern, dtype, 1);
  switch (dtype_size(dtype)) {
    case 1:
      std::memset(dst, pattern[0], static_cast<size_t>(n));
      return;
    case 2:
      fill_pattern<uint16_t>(dst, n, pattern);
      return;
    case 4:
      fill_pattern<uint32_t>(dst, n, pattern);
      return;
    case 8:
      fill_pattern<uint64_t>(dst, n, pattern);
      return;
  }
  BRAID_FAIL(kInvalidArgument, "fill: dtype value ", static_cast<int>(dtype), " is not a DType");
}

void copy_nontemporal(void* dst, const void* src, int64_t bytes) {
  BRAID_CHECK(bytes >= 0, kInvalidArgument, "copy_nontemporal: bytes ", bytes, " is negative");
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
#if defined(__SSE2__)
  // Head up to the destination's next 64-byte boundary, so every streaming store fills whole
  // write-combining lines.
  const int64_t head = std::min<int64_t>(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  if (head > 0) std::memcpy(d, s, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  if (i < bytes) std::memcpy(d + i, s + i, static_cast<size_t>(bytes - i));
  // Streaming stores are weakly ordered: fence them before anything that publishes the data.
  _mm_sfence();
#else
  if (bytes > 0) std::memcpy(d, s, static_cast<size_t>(bytes));
#endif
}

}  // namespace braid::kernels::cpu
