// device_memory.h: CUDA device memory through CUDA's runtime, in a build with NCCL (the only
// GPU backend braid bench measures); elsewhere every GPU request is kNotSupported.
#include "bench/device_memory.h"

#include <algorithm>

#include "braid/comm/rank_info.h"
#include "braid/core/config.h"
#include "braid/core/error.h"

#if BRAID_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace braid::bench {

#if BRAID_HAVE_NCCL
namespace {

void cuda_check(cudaError_t rc, const char* what, Device device) {
  if (rc == cudaSuccess) return;
  (void)cudaGetLastError();
  BRAID_FAIL(kInternal, "braid bench: ", what, " on ", device.str(),
             " failed: ", cudaGetErrorString(rc));
}

}  // namespace

Device memory_device_of(const std::string& backend) {
  if (backend != "nccl") return kCPU;
  int count = 0;  // left unset without a driver
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    BRAID_FAIL(kNotSupported, "braid bench --backend nccl: no CUDA device is visible (",
               cudaGetErrorString(rc), ")");
  }
  return Device(DeviceType::kCUDA, default_device_index(detect_rank_info().local_rank, count));
}

void* device_allocate(Device device, size_t bytes) {
  BRAID_CHECK(device.type == DeviceType::kCUDA, kNotSupported, "braid bench: cannot allocate on ",
              device.str());
  cuda_check(cudaSetDevice(device.index), "cudaSetDevice", device);
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc", device);
  cuda_check(cudaMemset(p, 0, std::max<size_t>(bytes, 1)), "cudaMemset", device);
  return p;
}

void device_free(Device device, void* ptr) {
  (void)cudaSetDevice(device.index);
  (void)cudaFree(ptr);
}

void copy_to_device(Device device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", device);
}

void copy_to_host(Device device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", device);
}

#else

Device memory_device_of(const std::string& backend) {
  BRAID_CHECK(backend != "nccl", kNotSupported,
              "braid bench --backend nccl: this build has no NCCL (see `braid env`)");
  return kCPU;
}

void* device_allocate(Device device, size_t) {
  BRAID_FAIL(kNotSupported, "braid bench: this build cannot allocate on ", device.str());
}
void device_free(Device, void*) {}
void copy_to_device(Device device, void*, const void*, size_t) {
  BRAID_FAIL(kNotSupported, "braid bench: this build cannot copy to ", device.str());
}
void copy_to_host(Device device, void*, const void*, size_t) {
  BRAID_FAIL(kNotSupported, "braid bench: this build cannot copy from ", device.str());
}

#endif

}  // namespace braid::bench
