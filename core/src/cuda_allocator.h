// The stream-aware caching allocators of the cuda runtime (cuda_allocator.cc): one per GPU for
// device memory, and one process-wide for pinned host memory. Internal to core.
#pragma once

#include <memory>

#include "braid/core/allocator.h"
#include "braid/core/device_runtime.h"

namespace braid::cuda_detail {

// Device memory of cuda:`index`, taken from runtime.raw_allocate (cudaMalloc).
std::unique_ptr<Allocator> make_device_allocator(DeviceRuntime& runtime, int index);

// Page-locked host memory (cudaHostAlloc, portable to every device); device() is cpu.
std::unique_ptr<Allocator> make_pinned_host_allocator();

}  // namespace braid::cuda_detail
