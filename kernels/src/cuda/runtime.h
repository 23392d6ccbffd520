// CUDA runtime helpers of the GPU kernels. Failures become braid::Error (docs/errors.md): every
// runtime call goes through BRAID_CUDA_CHECK, so a failure names the entry point, the call as
// written and CUDA's own error name and text, and never exits or aborts.
//
//   BRAID_CUDA_CHECK("optimizer_step", cudaMemsetAsync(flag, 0, sizeof(int), s));
//   -> braid: not supported: optimizer_step: cudaMemsetAsync(flag, 0, sizeof(int), s) failed:
//      cudaErrorNoDevice (no CUDA-capable device is detected)
#pragma once

#include <cstddef>
#include <source_location>

#include "braid/core/error.h"
#include "vendor.h"

namespace braid::kernels::cuda::detail {

// What a caller may do about a CUDA error, as braid's kinds say it. Errors a kernel raised
// (an illegal address, a trap) are sticky and leave the context unusable: kInternal.
inline ErrorKind cuda_error_kind(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return ErrorKind::kOutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
      return ErrorKind::kNotSupported;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      return ErrorKind::kInvalidArgument;
    default:
      return ErrorKind::kInternal;
  }
}

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* op, const char* call,
                                          std::source_location where) {
  ::braid::detail::throw_error(
      cuda_error_kind(err),
      ::braid::detail::concat(op, ": ", call, " failed: ", cudaGetErrorName(err), " (",
                              cudaGetErrorString(err), ")"),
      where);
}

inline void check_cuda(cudaError_t err, const char* op, const char* call,
                       std::source_location where = std::source_location::current()) {
  if (err != cudaSuccess) [[unlikely]] {
    throw_cuda_error(err, op, call, where);
  }
}

// A temporary device buffer ordered on a stream (cudaMallocAsync / cudaFreeAsync): freed on
// the stream when it goes out of scope, also when an exception leaves the scope, so no error
// path leaks it. Stream-ordered, so concurrent calls on different streams never share it.
class StreamBuffer {
 public:
  StreamBuffer(const char* op, size_t bytes, cudaStream_t stream,
               std::source_location where = std::source_location::current())
      : stream_(stream) {
    if (bytes > 0) check_cuda(cudaMallocAsync(&ptr_, bytes, stream), op, "cudaMallocAsync", where);
  }
  ~StreamBuffer() {
    if (ptr_) (void)cudaFreeAsync(ptr_, stream_);  // a destructor does not throw
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  void* get() const { return ptr_; }
  // Frees now, reporting a failure (the destructor cannot).
  void release(const char* op) {
    void* p = ptr_;
    ptr_ = nullptr;
    if (p) check_cuda(cudaFreeAsync(p, stream_), op, "cudaFreeAsync");
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace braid::kernels::cuda::detail

// Control flow only: the macro exists to put the call's text into the message.
#define BRAID_CUDA_CHECK(op, ...) \
  ::braid::kernels::cuda::detail::check_cuda((__VA_ARGS__), op, #__VA_ARGS__)
