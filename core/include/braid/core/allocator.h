// SPDX-License-Identifier: Apache-2.0
// Allocator: per-device caching allocation with statistics (design.md, "Allocator").
// CPU blocks are 64-byte aligned; freed blocks are kept in size-class bins for reuse until
// empty_cache(). Meta allocates nothing: it hands out a null pointer and counts bytes, so a
// model built on meta can be sized (estimate-memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "braid/core/device.h"

namespace braid {

struct Stream;

inline constexpr size_t kCpuAlignment = 64;

struct AllocatorStats {
  size_t current_bytes = 0;    // bytes handed to callers now (requested sizes)
  size_t peak_bytes = 0;       // max of current_bytes since start or reset_peak()
  size_t reserved_bytes = 0;   // bytes held from the OS / driver, cached blocks included
  size_t num_allocations = 0;  // allocate() calls that returned a block, since start
  size_t num_frees = 0;
  size_t cache_hits = 0;  // allocations served from the cache
};

// Owning pointer to device memory: frees through its deleter (the allocator, or an external
// owner's callback for from_blob).
class DataPtr {
 public:
  using Deleter = std::function<void(void*)>;
  DataPtr() = default;
  DataPtr(void* ptr, Device device, Deleter deleter)
      : ptr_(ptr), device_(device), deleter_(std::move(deleter)) {}
  DataPtr(DataPtr&& o) noexcept { *this = std::move(o); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_;
      device_ = o.device_;
      deleter_ = std::move(o.deleter_);
      o.ptr_ = nullptr;
      o.deleter_ = nullptr;
    }
    return *this;
  }
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() { reset(); }

  void reset() {
    if (deleter_) deleter_(ptr_);
    ptr_ = nullptr;
    deleter_ = nullptr;
  }
  void* get() const { return ptr_; }
  Device device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  Device device_;
  Deleter deleter_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // Returns a block of at least `bytes` (aligned to kCpuAlignment on cpu). bytes == 0 gives
  // an empty DataPtr. Throws kOutOfMemory naming the size, the device and the current stats.
  virtual DataPtr allocate(size_t bytes) = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached, unused blocks to the OS / driver.
  virtual void empty_cache() = 0;

  // (optional) Says that the block at `ptr` (as allocate() returned it) is also used by work
  // on `stream`, so that once freed it is not handed out again until that work is done (the
  // recordStream of PyTorch's CUDA caching allocator). Allocators whose memory is only used
  // synchronously (cpu, meta) need nothing: the default does nothing.
  virtual void record_stream(void* ptr, const Stream& stream) {}
};

// The process-wide allocator of a device (thread-safe). Throws kNotSupported for device
// types that are not built. A GPU device's allocator is its runtime's stream-aware one
// (docs/gpu.md, "Device runtime").
Allocator& get_allocator(Device device);

// Whether [ptr, ptr + bytes) lies in memory that transparent huge pages back, as far as this
// process can tell cheaply: inside one block of braid's cpu allocator mapped for them (blocks of
// BRAID_CPU_HUGEPAGES and more) where the kernel's mode is "madvise", or anywhere where it is
// "always"; never where it is "never". A hint for work whose cost is per page (the shm
// backend's kernel copy pins every page it reads): the kernel may have left parts of a block on
// 4 KiB pages. Thread-safe.
bool cpu_memory_on_huge_pages(const void* ptr, size_t bytes);

// The process-wide allocator of page-locked (pinned) host memory, for asynchronous copies
// between host and GPU: blocks are host memory (device() is cpu) provided by the first GPU
// runtime with a visible device (cuda, then hip). Throws kNotSupported when there is none.
Allocator& pinned_host_allocator();

}  // namespace braid
