// Device memory for braid bench's buffers when the backend it measures works on GPU memory
// (nccl): where its buffers live, and allocation and copies there. device_memory.cc is the one
// file of the bench that branches on BRAID_HAVE_NCCL; it calls CUDA's runtime directly until
// braid's own CUDA DeviceRuntime exists.
#pragma once

#include <cstddef>
#include <string>

#include "braid/core/device.h"

namespace braid::bench {

// Where `backend`'s collectives read and write: cuda:<device> for nccl (the device the backend
// picks, default_device_index of LOCAL_RANK), the host for every other backend. Throws
// kNotSupported when the backend needs a GPU that this build or machine lacks.
Device memory_device_of(const std::string& backend);

// `bytes` of zeroed memory on `device` (never null); free with device_free.
void* device_allocate(Device device, size_t bytes);
void device_free(Device device, void* ptr);
// Synchronous copies between host memory and `device`.
void copy_to_device(Device device, void* dst, const void* src, size_t bytes);
void copy_to_host(Device device, void* dst, const void* src, size_t bytes);

}  // namespace braid::bench
