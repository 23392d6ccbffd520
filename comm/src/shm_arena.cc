// The shm backend's per-rank arena (docs/shm.md, "Zero-copy buffers"): allocate() hands out
// 64-byte aligned blocks of this rank's arena in the group segment, first fit over a
// coalesced free list, reserving each block's pages in /dev/shm before handing it out.
// Peers reach a block through the offset a rank publishes per call, never through a pointer
// (every rank maps the segment at its own address).
#include <algorithm>
#include <cstdint>

#include "shm_group.h"

namespace braid::shm {
namespace {

constexpr uint64_t kAlign = 64;

}  // namespace

void ShmGroup::init_arena() {
  const uint64_t arena = seg_->header().arena_bytes;
  caps_ = make_capabilities(arena > 0);
  if (arena > 0) free_[0] = arena;
}

void* ShmGroup::allocate(size_t bytes) {
  const uint64_t arena = seg_->header().arena_bytes;
  if (arena == 0) return nullptr;
  // Zero bytes still get a distinct block, so every pointer allocate() returns is unique.
  const uint64_t want = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(arena_mu_);
  auto it =
      std::find_if(free_.begin(), free_.end(), [&](const auto& f) { return f.second >= want; });
  if (it == free_.end()) {
    uint64_t total = 0, largest = 0;
    for (const auto& [off, len] : free_) {
      total += len;
      largest = std::max(largest, len);
    }
    BRAID_FAIL(kOutOfMemory, "shm: allocate(", bytes, " bytes) on group rank ", me_,
               " (world rank ", context_.global_ranks[me_], "): the shared arena of ", arena,
               " bytes has ", total, " bytes free, the largest free block ", largest,
               " bytes (expected a request of at most the largest free block; release "
               "buffers or raise BRAID_SHM_ARENA_BYTES)");
  }
  const uint64_t off = it->first, len = it->second;
  seg_->reserve_arena(me_, off, want);  // throws before the free list changes
  free_.erase(it);
  if (len > want) free_[off + want] = len - want;
  blocks_[off] = want;
  return seg_->arena(me_) + off;
}

void ShmGroup::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(arena_mu_);
  const auto* p = static_cast<const uint8_t*>(ptr);
  const uint8_t* base = seg_->arena(me_);
  const bool inside = p >= base && p < base + seg_->header().arena_bytes;
  auto it = inside ? blocks_.find(static_cast<uint64_t>(p - base)) : blocks_.end();
  BRAID_CHECK(it != blocks_.end(), kInvalidArgument, "shm: release(", ptr, ") on group rank ", me_,
              ": not a block that allocate() of this backend handed out (expected a "
              "pointer returned by allocate() and not yet released)");
  uint64_t off = it->first, len = it->second;
  blocks_.erase(it);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_[off] = len;
}

int64_t ShmGroup::arena_offset(const void* ptr, int64_t bytes) {
  if (ptr == nullptr || bytes <= 0 || seg_->header().arena_bytes == 0) return -1;
  const auto* p = static_cast<const uint8_t*>(ptr);
  const uint8_t* base = seg_->arena(me_);
  if (p < base || p >= base + seg_->header().arena_bytes) return -1;
  const uint64_t off = static_cast<uint64_t>(p - base);
  std::lock_guard<std::mutex> lock(arena_mu_);
  auto it = blocks_.upper_bound(off);  // the block holding off starts at or before it
  if (it == blocks_.begin()) return -1;
  --it;
  const bool within = off + static_cast<uint64_t>(bytes) <= it->first + it->second;
  return within ? static_cast<int64_t>(off) : -1;
}

}  // namespace braid::shm
