// Helpers of the nccl backend's GPU tests (nccl_*_gpu_test.cc, label gpu): how many GPUs are
// visible, asked in a forked child so that this process never initializes CUDA before it
// forks the ranks (CUDA does not survive a fork), device buffers, and raw collective calls
// through the ProcessGroup front.
#pragma once

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"

namespace braid::testing {

struct GpuProbe {
  int count = 0;
  std::string why;  // empty when count > 0
};

// cudaGetDeviceCount in a child process. Without a driver it fails (error 35) and leaves the
// count unset: 0 then.
inline GpuProbe probe_gpus() {
  int p[2];
  if (::pipe(p) != 0) return {0, "pipe() failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    char text[256] = {};
    std::snprintf(text, sizeof text, "%d %s", rc == cudaSuccess ? count : 0,
                  rc == cudaSuccess ? "no CUDA device" : cudaGetErrorString(rc));
    (void)!::write(p[1], text, std::strlen(text));
    ::_exit(0);
  }
  ::close(p[1]);
  char text[256] = {};
  ssize_t n = ::read(p[0], text, sizeof text - 1);
  ::close(p[0]);
  ::waitpid(pid, nullptr, 0);
  if (n <= 0) return {0, "the probe process reported nothing"};
  GpuProbe probe;
  probe.count = std::atoi(text);
  const char* space = std::strchr(text, ' ');
  if (probe.count == 0) probe.why = space ? space + 1 : "no CUDA device";
  return probe;
}

#define BRAID_REQUIRE_GPUS(n)                                                                  \
  do {                                                                                         \
    const ::braid::testing::GpuProbe probe_ = ::braid::testing::probe_gpus();                  \
    if (probe_.count < (n)) {                                                                  \
      GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s), " << probe_.count << " visible"        \
                   << (probe_.why.empty() ? "" : " (cudaGetDeviceCount: " + probe_.why + ")"); \
    }                                                                                          \
  } while (0)

inline void cuda_ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(rc));
  }
}

// Device memory holding `values` (or `n` bytes of 0xA5: never-written elements show).
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T)),
            "cudaMalloc");
    cuda_ok(cudaMemset(ptr, 0xA5, std::max<size_t>(n, 1) * sizeof(T)), "cudaMemset");
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    cuda_ok(cudaMemcpy(ptr, values.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> host() const {
    std::vector<T> out(n);
    cuda_ok(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }
};

template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  if (got.size() != want.size()) {
    throw std::runtime_error(what + ": " + std::to_string(got.size()) + " elements, expected " +
                             std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " +
                               std::to_string(got[i]) + ", expected " + std::to_string(want[i]));
    }
  }
}

}  // namespace braid::testing
