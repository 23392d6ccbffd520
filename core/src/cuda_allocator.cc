// The cuda caching allocator: the cpu allocator's size-class bins (allocator.cc), made
// stream-aware in the manner of c10's CUDACachingAllocator.
//
// Note [Stream-aware reuse]: a block belongs to the stream that was current for its device
// when it was allocated (braid/core/stream.h), its "home" stream. Work on one stream runs in
// order, so a block freed on the host while kernels on its home stream still use it can be
// handed out again at once for that stream: the next user's work queues behind the last
// one's. For another stream that is not true, so freeing records an event on the home stream,
// and the block serves another stream only once that event has completed (then its new home
// is that stream). record_stream(ptr, s) says that work on s also uses the block: freeing
// records an event on s too, and the block is not handed out, even on its home stream, until
// those events have completed (c10's recordStream). Nothing ever waits on the host for reuse:
// a block whose events are pending is skipped and a new one is allocated.
//
// Note [CUDA size classes]: requests up to 1 MiB round up to a multiple of 512 bytes (c10's
// kMinBlockSize: cudaMalloc hands out at least 512-byte granules, so finer classes would save
// no device memory and only split the bins); larger ones round up like the cpu allocator's, to
// a multiple of 1/8 of the largest power of two below them (at most 12.5% waste, few classes).
// A cached block serves only requests of its own class: unlike c10, blocks are never split or
// merged, one cudaMalloc per block. That keeps the allocator small and its statistics exact;
// c10's 2 MiB / 20 MiB segments with splitting are the step to take if a profile shows
// cudaMalloc calls or fragmentation mattering.
#include "cuda_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "braid/core/stream.h"
#include "cuda_check.h"

namespace braid::cuda_detail {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kSmallGranularity = 512;

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// Note [CUDA size classes]. 0 when rounding overflows (no such block can exist).
size_t size_class(size_t bytes) {
  if (bytes <= kSmallLimit) return round_up(bytes, kSmallGranularity);
  const size_t block = round_up(bytes, std::bit_floor(bytes - 1) / 8);
  return block >= bytes ? block : 0;
}

// Where blocks come from, and which GPU's current stream a new block is used on.
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual Device device() const = 0;  // what the DataPtrs say
  virtual int stream_device() const = 0;
  virtual void* allocate(size_t bytes) = 0;  // throws kOutOfMemory
  virtual void free(void* ptr, size_t bytes) noexcept = 0;
};

class DeviceMemory final : public BlockSource {
 public:
  DeviceMemory(DeviceRuntime& runtime, int index) : runtime_(runtime), index_(index) {}
  Device device() const override { return Device(DeviceType::kCUDA, index_); }
  int stream_device() const override { return index_; }
  void* allocate(size_t bytes) override { return runtime_.raw_allocate(index_, bytes); }
  void free(void* ptr, size_t bytes) noexcept override { runtime_.raw_free(index_, ptr, bytes); }

 private:
  DeviceRuntime& runtime_;
  const int index_;
};

// Pinned blocks are used by copies on the current stream of the thread's current device.
class PinnedHostMemory final : public BlockSource {
 public:
  Device device() const override { return kCPU; }
  int stream_device() const override {
    int index = 0;
    BRAID_CUDART_CHECK("pinned_host_allocator", cudaGetDevice(&index));
    return index;
  }
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    // Portable: pinned for every device's context, since the allocator is process-wide.
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      BRAID_FAIL(kOutOfMemory, "cannot allocate ", bytes,
                 " bytes of pinned host memory: cudaHostAlloc failed with ", cuda_error_text(err));
    }
    check_cuda(err, "pinned_host_allocator", "cudaHostAlloc");
    return ptr;
  }
  void free(void* ptr, size_t bytes) noexcept override {
    const cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      BRAID_LOG(kWarning) << "freeing " << bytes << " bytes of pinned host memory at " << ptr
                          << " failed: " << cuda_error_text(err);
    }
  }
};

struct StreamRef {
  int device = 0;
  cudaStream_t stream = nullptr;
  friend bool operator==(const StreamRef&, const StreamRef&) = default;
};

struct EventRef {
  int device = 0;
  cudaEvent_t event = nullptr;
};

struct LiveBlock {
  size_t block = 0;      // size class: the bytes cudaMalloc gave
  size_t requested = 0;  // what the caller asked for (the statistics count these)
  StreamRef home;
  std::vector<StreamRef> uses;  // other streams, from record_stream
};

struct FreeBlock {
  void* ptr = nullptr;
  StreamRef home;
  EventRef freed;              // recorded on `home` when freed
  std::vector<EventRef> uses;  // recorded on each stream of LiveBlock::uses when freed
};

class StreamCachingAllocator final : public Allocator {
 public:
  explicit StreamCachingAllocator(std::unique_ptr<BlockSource> source)
      : source_(std::move(source)), device_(source_->device()) {}

  Device device() const override { return device_; }

  DataPtr allocate(size_t bytes) override {
    if (bytes == 0) return DataPtr(nullptr, device_, nullptr);
    const size_t block = size_class(bytes);
    BRAID_CHECK(block != 0, kOutOfMemory, "cannot allocate ", bytes, " bytes on device ", device_,
                ": larger than any block");
    const int dev = source_->stream_device();
    const StreamRef home{
        dev, static_cast<cudaStream_t>(current_stream(Device(DeviceType::kCUDA, dev)).handle)};
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ptr = take_cached(block, home);
      if (ptr) {
        ++stats_.cache_hits;
        note_allocation(ptr, block, bytes, home);
      }
    }
    if (!ptr) {
      ptr = allocate_fresh(block, bytes);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.reserved_bytes += block;
      note_allocation(ptr, block, bytes, home);
    }
    return DataPtr(ptr, device_, [this](void* p) { release(p); });
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }

  // Waits (bounded, Note [Bounded waits]) for the events of each cached block, then frees it.
  // On a failed wait the blocks not yet freed go back to the cache before the error leaves.
  void empty_cache() override {
    std::vector<std::pair<size_t, FreeBlock>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [block, list] : free_) {
        for (FreeBlock& f : list) blocks.emplace_back(block, std::move(f));
      }
      free_.clear();
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto& [block, f] = blocks[i];
      try {
        wait_for(f.freed);
        for (const EventRef& e : f.uses) wait_for(e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t j = i; j < blocks.size(); ++j) {
          free_[blocks[j].first].push_back(std::move(blocks[j].second));
        }
        throw;
      }
      source_->free(f.ptr, block);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.reserved_bytes -= block;
      recycle(f);
    }
  }

  void record_stream(void* ptr, const Stream& stream) override {
    if (ptr == nullptr) return;
    BRAID_CHECK(stream.device.type == DeviceType::kCUDA, kInvalidArgument,
                "record_stream: the stream is on ", stream.device, "; expected a cuda stream");
    BRAID_CHECK(device_.is_cpu() || stream.device == device_, kInvalidArgument,
                "record_stream: the stream is on ", stream.device, "; expected a stream of ",
                device_, ", where the block lives");
    const StreamRef use{stream.device.index, static_cast<cudaStream_t>(stream.handle)};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    BRAID_CHECK(it != live_.end(), kInvalidArgument, "record_stream: ", ptr,
                " is not a block in use from the allocator of ", device_,
                "; expected a pointer that allocate() returned and that is not freed");
    LiveBlock& b = it->second;
    if (use == b.home || std::find(b.uses.begin(), b.uses.end(), use) != b.uses.end()) return;
    b.uses.push_back(use);
  }

 private:
  // Under mu_. Note [Stream-aware reuse]: first a block of this stream whose extra uses are
  // done, else one of any stream whose free and uses are done.
  void* take_cached(size_t block, const StreamRef& home) {
    auto it = free_.find(block);
    if (it == free_.end()) return nullptr;
    std::vector<FreeBlock>& list = it->second;
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = list.size(); i-- > 0;) {
        FreeBlock& f = list[i];
        const bool same_stream = f.home == home;
        if (pass == 0 && !same_stream) continue;
        if (pass == 1 && (same_stream || !completed(f.freed))) continue;
        if (!std::all_of(f.uses.begin(), f.uses.end(),
                         [](const EventRef& e) { return completed(e); })) {
          continue;
        }
        void* ptr = f.ptr;
        recycle(f);
        list[i] = std::move(list.back());
        list.pop_back();
        return ptr;
      }
    }
    return nullptr;
  }

  void note_allocation(void* ptr, size_t block, size_t bytes, const StreamRef& home) {
    live_[ptr] = LiveBlock{block, bytes, home, {}};
    stats_.current_bytes += bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    ++stats_.num_allocations;
  }

  // Outside the lock: cudaMalloc is slow. On failure the cache (blocks of other classes, or of
  // this class still in use by another stream) may be what fills the device: free it and try
  // once more, so kOutOfMemory means the memory is really in use.
  void* allocate_fresh(size_t block, size_t bytes) {
    try {
      return source_->allocate(block);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) throw;
    }
    empty_cache();
    try {
      return source_->allocate(block);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) throw;
      const AllocatorStats s = stats();
      BRAID_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes (block of ", block,
                 ") on device ", device_, " (in use ", s.current_bytes, " bytes, reserved ",
                 s.reserved_bytes, " bytes, peak ", s.peak_bytes,
                 " bytes, after emptying the cache): ", e.message());
    }
  }

  // The DataPtr deleter: never throws. If an event cannot be recorded (only a broken context
  // does that), the block is neither reused nor freed: no later user can race with its last.
  void release(void* ptr) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      BRAID_LOG(kError) << "allocator of " << device_ << ": freeing " << ptr
                        << ", which it did not hand out (or freed twice); ignored";
      return;
    }
    const LiveBlock b = std::move(it->second);
    live_.erase(it);
    stats_.current_bytes -= b.requested;
    ++stats_.num_frees;
    FreeBlock f{ptr, b.home, {}, {}};
    try {
      f.freed = record_on(b.home);
      for (const StreamRef& s : b.uses) f.uses.push_back(record_on(s));
    } catch (const Error& e) {
      BRAID_LOG(kWarning) << "allocator of " << device_ << ": a block of " << b.block
                          << " bytes is dropped from the cache: " << e.message();
      recycle(f);
      return;
    }
    free_[b.block].push_back(std::move(f));
  }

  // Under mu_: an event recorded now on `s`, from the pool of its device.
  EventRef record_on(const StreamRef& s) {
    DeviceGuard guard(s.device, "allocator free");
    std::vector<cudaEvent_t>& pool = events_[s.device];
    cudaEvent_t e = nullptr;
    if (pool.empty()) {
      BRAID_CUDART_CHECK("allocator free", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = pool.back();
      pool.pop_back();
    }
    const cudaError_t err = cudaEventRecord(e, s.stream);
    if (err != cudaSuccess) {
      pool.push_back(e);
      throw_cuda_error(err, "allocator free", "cudaEventRecord", std::source_location::current());
    }
    return EventRef{s.device, e};
  }

  // Under mu_: a block's events go back to the pool.
  void recycle(FreeBlock& f) {
    if (f.freed.event) events_[f.freed.device].push_back(f.freed.event);
    for (const EventRef& e : f.uses) events_[e.device].push_back(e.event);
    f.freed.event = nullptr;
    f.uses.clear();
  }

  static bool completed(const EventRef& e) {
    if (e.event == nullptr) return true;
    const cudaError_t err = cudaEventQuery(e.event);
    if (err == cudaSuccess) return true;
    (void)cudaGetLastError();  // not ready, or a broken context: either way not reusable yet
    return false;
  }

  static void wait_for(const EventRef& e) {
    if (e.event == nullptr) return;
    DeviceGuard guard(e.device, "empty_cache");
    std::ostringstream what;
    what << "the free of a cached block (event " << e.event << " on cuda:" << e.device << ")";
    wait_until_ready([&e] { return cudaEventQuery(e.event); }, "empty_cache", what.str(),
                     default_wait_timeout());
  }

  const std::unique_ptr<BlockSource> source_;
  const Device device_;
  mutable std::mutex mu_;
  AllocatorStats stats_;
  std::unordered_map<void*, LiveBlock> live_;
  std::unordered_map<size_t, std::vector<FreeBlock>> free_;   // size class -> cached blocks
  std::unordered_map<int, std::vector<cudaEvent_t>> events_;  // device -> unused events
};

}  // namespace

std::unique_ptr<Allocator> make_device_allocator(DeviceRuntime& runtime, int index) {
  return std::make_unique<StreamCachingAllocator>(std::make_unique<DeviceMemory>(runtime, index));
}

std::unique_ptr<Allocator> make_pinned_host_allocator() {
  return std::make_unique<StreamCachingAllocator>(std::make_unique<PinnedHostMemory>());
}

}  // namespace braid::cuda_detail
