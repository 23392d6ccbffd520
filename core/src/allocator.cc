// Allocators: a caching allocator over any DeviceRuntime's raw_allocate / raw_free (the cpu
// one is the process-wide host allocator), and a counting allocator for meta.
//
// Size classes (docs/environment.md repeats them):
//   requests up to 1 MiB round up to a multiple of 64 bytes;
//   larger requests round up to a multiple of 1/8 of the largest power of two below them
//   (1 MiB + 1 -> 1.125 MiB, 3 MiB -> 3 MiB, 3 MiB + 1 -> 3.25 MiB, 10^8 -> 96 MiB), wasting at
//   most 12.5% while keeping few enough classes that freed blocks get reused.
// A freed block goes to the bin of its class and serves the next request of that class.
// BRAID_CPU_ALLOCATOR_CACHE=0 (read once, when the cpu allocator is first used) returns
// freed blocks to the OS at once.
//
// A GPU runtime provides its own stream-aware allocator (DeviceRuntime::create_allocator; cuda:
// core/src/cuda_allocator.cc); this one serves the cpu and any runtime that provides none, whose
// memory must then be used synchronously.
#include "braid/core/allocator.h"

#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallGranularity = 64;

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// The block size for a request; 0 when rounding overflows (no such block can exist).
size_t size_class(size_t bytes) {
  if (bytes <= kSmallLimit) return round_up(bytes, kSmallGranularity);
  const size_t block = round_up(bytes, std::bit_floor(bytes - 1) / 8);
  return block >= bytes ? block : 0;
}

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(DeviceRuntime& runtime, Device device, bool caching)
      : runtime_(runtime), device_(device), caching_(caching) {}

  Device device() const override { return device_; }

  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return DataPtr(nullptr, device_, nullptr);
    const size_t block = size_class(bytes);
    BRAID_CHECK(block != 0, kOutOfMemory, "cannot allocate ", bytes, " bytes on device ", device_,
                ": larger than any block");
    void* ptr = take_cached(block, bytes);
    if (!ptr) {
      ptr = allocate_fresh(block, bytes);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.reserved_bytes += block;
      count_allocation(bytes);
    }
    return DataPtr(ptr, device_, [this, bytes](void* p) { release(p, bytes); });
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }

  void empty_cache() override {
    std::unordered_map<size_t, std::vector<void*>> bins;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bins.swap(bins_);
      for (const auto& [block, ptrs] : bins) stats_.reserved_bytes -= block * ptrs.size();
    }
    for (const auto& [block, ptrs] : bins) {
      for (void* p : ptrs) runtime_.raw_free(device_.index, p, block);
    }
  }

 private:
  void count_allocation(size_t bytes) {
    stats_.current_bytes += bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    ++stats_.num_allocations;
  }

  void* take_cached(size_t block, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bins_.find(block);
    if (it == bins_.end() || it->second.empty()) return nullptr;
    void* ptr = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
    count_allocation(bytes);
    return ptr;
  }

  // Outside the lock: the OS call may be slow. On failure, cached blocks of other classes
  // may be what fills memory, so release them and try once more.
  void* allocate_fresh(size_t block, size_t bytes) {
    try {
      return runtime_.raw_allocate(device_.index, block);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) throw;
    }
    empty_cache();
    try {
      return runtime_.raw_allocate(device_.index, block);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) throw;
      const AllocatorStats s = stats();
      BRAID_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes (block of ", block,
                 ") on device ", device_, " (in use ", s.current_bytes, " bytes, reserved ",
                 s.reserved_bytes, " bytes, peak ", s.peak_bytes, " bytes): ", e.message());
    }
  }

  void release(void* ptr, size_t bytes) {
    const size_t block = size_class(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.current_bytes -= bytes;
      ++stats_.num_frees;
      if (caching_) {
        bins_[block].push_back(ptr);
        return;
      }
      stats_.reserved_bytes -= block;
    }
    runtime_.raw_free(device_.index, ptr, block);
  }

  DeviceRuntime& runtime_;
  const Device device_;
  const bool caching_;
  mutable std::mutex mu_;
  AllocatorStats stats_;
  std::unordered_map<size_t, std::vector<void*>> bins_;  // size class -> free blocks
};

// Meta holds no memory; it counts what a model built on it would use.
class MetaAllocator final : public Allocator {
 public:
  Device device() const override { return kMeta; }

  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return DataPtr(nullptr, kMeta, nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.current_bytes += bytes;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
      ++stats_.num_allocations;
    }
    return DataPtr(nullptr, kMeta, [this, bytes](void*) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.current_bytes -= bytes;
      ++stats_.num_frees;
    });
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache() override {}

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

Allocator& device_allocator(Device device) {
  // Allocators and the blocks they cache live until the process ends: DataPtrs may outlive
  // any static destructor order.
  static std::mutex* mu = new std::mutex;
  static auto* allocators = new std::map<std::pair<int, int>, Allocator*>;
  DeviceRuntime& runtime = device_runtime(device.type);
  const int count = runtime.device_count();
  BRAID_CHECK(device.index >= 0 && device.index < count, kOutOfRange, "device ", device,
              " does not exist; ", count, " ", device_type_name(device.type),
              " device(s) are visible");
  std::lock_guard<std::mutex> lock(*mu);
  Allocator*& slot = (*allocators)[{static_cast<int>(device.type), device.index}];
  if (!slot) {
    std::unique_ptr<Allocator> own = runtime.create_allocator(device.index);
    slot = own ? own.release() : new CachingAllocator(runtime, device, /*caching=*/true);
  }
  return *slot;
}

}  // namespace

Allocator& get_allocator(Device device) {
  BRAID_CHECK(device.index == 0 || (!device.is_cpu() && !device.is_meta()), kInvalidArgument,
              "device ", device_type_name(device.type), ":", device.index, " is not valid; ",
              device_type_name(device.type), " has only index 0");
  if (device.is_cpu()) {
    static Allocator* cpu = new CachingAllocator(device_runtime(DeviceType::kCPU), kCPU,
                                                 get_env_bool("BRAID_CPU_ALLOCATOR_CACHE", true));
    return *cpu;
  }
  if (device.is_meta()) {
    static Allocator* meta = new MetaAllocator;
    return *meta;
  }
  return device_allocator(device);
}

Allocator& pinned_host_allocator() {
  std::string why;
  for (DeviceType type : {DeviceType::kCUDA, DeviceType::kHIP}) {
    if (!why.empty()) why += "; ";
    if (!is_runtime_built(type)) {
      why += std::string(device_type_name(type)) + ": not built";
      continue;
    }
    try {
      if (Allocator* a = device_runtime(type).pinned_host_allocator()) return *a;
      why += std::string(device_type_name(type)) + ": the runtime has no pinned host memory";
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotSupported) throw;
      why += e.message();  // built, but no device is visible
    }
  }
  BRAID_FAIL(kNotSupported,
             "pinned host memory needs a GPU runtime with a visible device, and there is none (",
             why, ")");
}

}  // namespace braid
