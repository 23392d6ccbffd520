// Internal helpers of core's CUDA runtime (cuda_runtime.cc, cuda_allocator.cc): CUDA errors as
// braid::Error, the device guard every runtime call starts with, and the bounded wait that
// stream, event and device synchronization use. Compiled only when the build has CUDA.
//
// The error mapping mirrors kernels/src/cuda/runtime.h (core cannot include kernels/); keep the
// two in step. Core adds two codes the kernels never see: an invalid device ordinal is
// kOutOfRange, and peer access the hardware does not offer is kNotSupported.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <source_location>
#include <string>

#include "braid/core/device.h"
#include "braid/core/error.h"

namespace braid::cuda_detail {

// What a caller may do about a CUDA error, as braid's kinds say it. Errors a kernel raised (an
// illegal address, a trap) are sticky and leave the context unusable: kInternal.
inline ErrorKind cuda_error_kind(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return ErrorKind::kOutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorPeerAccessUnsupported:
      return ErrorKind::kNotSupported;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      return ErrorKind::kInvalidArgument;
    case cudaErrorInvalidDevice:
      return ErrorKind::kOutOfRange;
    default:
      return ErrorKind::kInternal;
  }
}

// "cudaErrorMemoryAllocation (out of memory)".
inline std::string cuda_error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}

// Throws the error of a failed call. The runtime also keeps it as the thread's "last error",
// which the kernels' launch checks read with cudaGetLastError: it is cleared first so that a
// refused call here is not reported again by an unrelated launch (sticky errors stay anyway).
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* op, const char* call,
                                          std::source_location where) {
  (void)cudaGetLastError();
  ::braid::detail::throw_error(
      cuda_error_kind(err),
      ::braid::detail::concat(op, ": ", call, " failed: ", cuda_error_text(err)), where);
}

inline void check_cuda(cudaError_t err, const char* op, const char* call,
                       std::source_location where = std::source_location::current()) {
  if (err != cudaSuccess) [[unlikely]] {
    throw_cuda_error(err, op, call, where);
  }
}

// Makes `index` the calling thread's current device for a scope and restores the previous
// one on exit, like c10's CUDAGuard. Every runtime call that touches a device starts with one,
// so callers never have to set the device themselves and never find it changed.
//
// Restoring does not create a context: when the previous device has no primary context yet
// (a thread that never used CUDA reports device 0), setting it back would create one there and
// take hundreds of MiB on GPU 0 of every process; c10's MaybeSetDevice skips that case, and so
// does this guard (Note [Restoring the device] in cuda_runtime.cc).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// The default deadline of a wait: BRAID_DEVICE_TIMEOUT seconds (unset: 1800). Throws
// kInvalidArgument naming a bad value.
std::chrono::milliseconds default_wait_timeout();

// The slow paths of wait_until_ready, shared by every instance.
[[noreturn]] void throw_wait_timeout(const char* op, const std::string& what,
                                     std::chrono::milliseconds timeout);
void pause_before_next_query(int round, std::chrono::steady_clock::time_point deadline);

// Waits until `query` (cudaStreamQuery / cudaEventQuery on one handle) returns cudaSuccess:
// spins briefly, then sleeps with growing intervals up to 1 ms (design.md, "Never spin blind").
// cudaErrorNotReady means "not yet"; any other error throws. After `timeout` throws kTimeout
// naming `what` (e.g. "stream 0x55d0 on cuda:1") and `op`.
template <typename Query>
void wait_until_ready(Query&& query, const char* op, const std::string& what,
                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int round = 0;; ++round) {
    const cudaError_t err = query();
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady)
      throw_cuda_error(err, op, what.c_str(), std::source_location::current());
    (void)cudaGetLastError();  // as c10 does after cudaErrorNotReady: leave no last error behind
    if (std::chrono::steady_clock::now() >= deadline) throw_wait_timeout(op, what, timeout);
    pause_before_next_query(round, deadline);
  }
}

// "stream 0x7f.. on cuda:1" / "the default stream of cuda:1".
std::string describe_stream(void* handle, int index);

}  // namespace braid::cuda_detail

// Control flow only: the macro exists to put the call's text into the message.
#define BRAID_CUDART_CHECK(op, ...) \
  ::braid::cuda_detail::check_cuda((__VA_ARGS__), op, #__VA_ARGS__)
