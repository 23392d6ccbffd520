// Helpers of the GPU tests: the skip every test starts with when no device is usable, device
// buffers that free themselves, and copies in both directions. Test code only: a failing CUDA
// call fails the test (ASSERT) rather than throwing.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::kernels::cuda::testing {

// Why the GPU tests cannot run here, or "" when a device is usable. With no driver (or no
// GPU) cudaGetDeviceCount returns an error (35, cudaErrorInsufficientDriver, on a machine
// without the driver) and leaves the count unset: it is initialised to 0.
inline std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable CUDA device: cudaGetDeviceCount returned ") +
           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (n == 0) return "no CUDA device (cudaGetDeviceCount found 0)";
  return "";
}

// Control flow only (GTEST_SKIP returns from the test).
#define BRAID_REQUIRE_GPU()                                                                     \
  do {                                                                                          \
    if (const std::string why = ::braid::kernels::cuda::testing::no_gpu_reason(); !why.empty()) \
      GTEST_SKIP() << why;                                                                      \
  } while (0)

#define BRAID_ASSERT_CUDA(...) ASSERT_EQ(cudaSuccess, (__VA_ARGS__)) << #__VA_ARGS__

// cudaMalloc'd bytes, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      ADD_FAILURE() << "cudaMalloc(" << bytes << ") failed";
    }
    bytes_ = bytes;
  }
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device copy of host bytes.
inline DeviceBuffer to_device(const void* host, size_t bytes) {
  DeviceBuffer d(bytes);
  if (bytes > 0 && d.get() &&
      cudaMemcpy(d.get(), host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    ADD_FAILURE() << "cudaMemcpy host to device of " << bytes << " bytes failed";
  return d;
}
template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  return to_device(v.data(), v.size() * sizeof(T));
}

inline void to_host(const DeviceBuffer& d, void* host) {
  if (d.bytes() > 0 && cudaMemcpy(host, d.get(), d.bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
    ADD_FAILURE() << "cudaMemcpy device to host of " << d.bytes() << " bytes failed";
}

}  // namespace braid::kernels::cuda::testing
