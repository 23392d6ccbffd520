// Allocators: the cpu caching allocator's statistics (exact arithmetic against the documented
// size classes), alignment, reuse, reset_peak, empty_cache, threads; the meta allocator's
// counting; BRAID_CPU_ALLOCATOR_CACHE (in a child process, since it is read once).
#include "braid/core/allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "child_process.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;

using testing::exit_child;
using testing::in_child;
using testing::kChildPassed;
using testing::run_child_test;

// The cpu allocator with an empty cache and the peak reset, and its stats at that point.
AllocatorStats fresh_cpu() {
  Allocator& a = get_allocator(kCPU);
  a.empty_cache();
  a.reset_peak();
  return a.stats();
}

TEST(CpuAllocator, ZeroBytesGivesAnEmptyPointerAndCountsNothing) {
  const AllocatorStats before = fresh_cpu();
  DataPtr p = get_allocator(kCPU).allocate(0);
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_EQ(p.device(), kCPU);
  const AllocatorStats after = get_allocator(kCPU).stats();
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
}

// Size classes as documented in allocator.cc and docs/environment.md.
TEST(CpuAllocator, ReservesTheDocumentedSizeClass) {
  const struct {
    size_t request, block;
  } cases[] = {{1, 64},
               {64, 64},
               {65, 128},
               {1000, 1024},
               {kMiB, kMiB},
               {kMiB + 1, kMiB + kMiB / 8},
               {3 * kMiB, 3 * kMiB},
               {3 * kMiB + 1, 3 * kMiB + kMiB / 4},
               {100'000'000, 96 * kMiB}};
  Allocator& a = get_allocator(kCPU);
  for (const auto& c : cases) {
    const AllocatorStats before = fresh_cpu();
    DataPtr p = a.allocate(c.request);
    const AllocatorStats after = a.stats();
    EXPECT_EQ(after.reserved_bytes - before.reserved_bytes, c.block) << c.request;
    EXPECT_EQ(after.current_bytes - before.current_bytes, c.request) << c.request;
  }
}

TEST(CpuAllocator, StatsArithmetic) {
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = fresh_cpu();
  DataPtr p1 = a.allocate(100);       // block 128
  DataPtr p2 = a.allocate(kMiB + 1);  // block 1.125 MiB
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, s0.current_bytes + 100 + kMiB + 1);
  EXPECT_EQ(s.peak_bytes, s.current_bytes);
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes + 128 + kMiB + kMiB / 8);
  EXPECT_EQ(s.num_allocations, s0.num_allocations + 2);
  EXPECT_EQ(s.num_frees, s0.num_frees);
  EXPECT_EQ(s.cache_hits, s0.cache_hits);

  void* first = p1.get();
  p1.reset();  // back to the cache: reserved unchanged
  s = a.stats();
  EXPECT_EQ(s.current_bytes, s0.current_bytes + kMiB + 1);
  EXPECT_EQ(s.peak_bytes, s0.current_bytes + 100 + kMiB + 1);
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes + 128 + kMiB + kMiB / 8);
  EXPECT_EQ(s.num_frees, s0.num_frees + 1);

  DataPtr p3 = a.allocate(120);  // same 128-byte class: served from the cache
  EXPECT_EQ(p3.get(), first);
  s = a.stats();
  EXPECT_EQ(s.cache_hits, s0.cache_hits + 1);
  EXPECT_EQ(s.num_allocations, s0.num_allocations + 3);
  EXPECT_EQ(s.current_bytes, s0.current_bytes + 120 + kMiB + 1);
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes + 128 + kMiB + kMiB / 8);

  DataPtr p4 = a.allocate(200);  // class 256 has no cached block: a miss
  s = a.stats();
  EXPECT_EQ(s.cache_hits, s0.cache_hits + 1);
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes + 128 + 256 + kMiB + kMiB / 8);
}

TEST(CpuAllocator, ImpossibleRequestIsOutOfMemoryAndCountsNothing) {
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = fresh_cpu();
  for (size_t bytes : {size_t{1} << 63, SIZE_MAX}) {
    try {
      a.allocate(bytes);
      ADD_FAILURE() << bytes << " bytes were allocated";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
      EXPECT_THAT(e.message(), HasSubstr(std::to_string(bytes)));
      EXPECT_THAT(e.message(), HasSubstr("cpu"));
    }
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, s0.current_bytes);
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes);
  EXPECT_EQ(s.num_allocations, s0.num_allocations);
}

TEST(CpuAllocator, PointersAre64ByteAlignedAndUsable) {
  Allocator& a = get_allocator(kCPU);
  std::vector<DataPtr> live;
  for (size_t bytes : {1, 7, 63, 64, 65, 1000, 4097, 65536, 1 << 20, (1 << 20) + 3}) {
    live.push_back(a.allocate(bytes));
    const DataPtr& p = live.back();
    ASSERT_NE(p.get(), nullptr);
    EXPECT_EQ(p.device(), kCPU);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % kCpuAlignment, 0u) << bytes;
    std::memset(p.get(), 0x5A, bytes);
  }
}

TEST(CpuAllocator, ResetPeakDropsToCurrent) {
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = fresh_cpu();
  DataPtr keep = a.allocate(1000);
  { DataPtr big = a.allocate(5000); }
  EXPECT_EQ(a.stats().peak_bytes, s0.current_bytes + 6000);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, s0.current_bytes + 1000);
  DataPtr more = a.allocate(10);
  EXPECT_EQ(a.stats().peak_bytes, s0.current_bytes + 1010);
}

TEST(CpuAllocator, EmptyCacheReleasesOnlyCachedBlocks) {
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = fresh_cpu();
  DataPtr live = a.allocate(300);  // block 320
  { DataPtr gone1 = a.allocate(4096), gone2 = a.allocate(2 * kMiB); }
  EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes + 320 + 4096 + 2 * kMiB);
  a.empty_cache();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes, s0.reserved_bytes + 320);
  EXPECT_EQ(s.current_bytes, s0.current_bytes + 300);
  const size_t hits = s.cache_hits;
  DataPtr again = a.allocate(4096);  // the cache is empty: no hit
  EXPECT_EQ(a.stats().cache_hits, hits);
}

TEST(CpuAllocator, ThreadsShareItSafely) {
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = fresh_cpu();
  constexpr int kThreads = 4, kRounds = 500;
  std::vector<std::thread> threads;
  std::vector<int> corrupt(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t state = 12345u + t;
      std::vector<std::pair<DataPtr, size_t>> mine;
      for (int i = 0; i < kRounds; ++i) {
        state = state * 1664525u + 1013904223u;
        const size_t bytes = 1 + (state >> 8) % 5000;
        DataPtr p = a.allocate(bytes);
        std::memset(p.get(), t + 1, bytes);
        mine.emplace_back(std::move(p), bytes);
        if (mine.size() > 8) {  // free the oldest after checking nobody else wrote to it
          auto& [old, n] = mine.front();
          const auto* c = static_cast<const unsigned char*>(old.get());
          for (size_t k = 0; k < n; ++k) corrupt[t] += c[k] != t + 1;
          mine.erase(mine.begin());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(corrupt[t], 0) << "thread " << t;
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.current_bytes, s0.current_bytes);
  EXPECT_EQ(s.num_allocations - s0.num_allocations, size_t{kThreads * kRounds});
  EXPECT_EQ(s.num_frees - s0.num_frees, size_t{kThreads * kRounds});
  EXPECT_GT(s.cache_hits, s0.cache_hits);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes);
}

TEST(MetaAllocator, CountsBytesButHoldsNone) {
  Allocator& m = get_allocator(kMeta);
  EXPECT_EQ(m.device(), kMeta);
  m.reset_peak();
  const AllocatorStats s0 = m.stats();
  {
    DataPtr w = m.allocate(size_t{1} << 40);  // a terabyte weighs nothing on meta
    DataPtr b = m.allocate(12);
    EXPECT_EQ(w.get(), nullptr);
    EXPECT_EQ(w.device(), kMeta);
    const AllocatorStats s = m.stats();
    EXPECT_EQ(s.current_bytes, s0.current_bytes + (size_t{1} << 40) + 12);
    EXPECT_EQ(s.peak_bytes, s.current_bytes);
    EXPECT_EQ(s.reserved_bytes, 0u);
    EXPECT_EQ(s.num_allocations, s0.num_allocations + 2);
  }
  const AllocatorStats s = m.stats();
  EXPECT_EQ(s.current_bytes, s0.current_bytes);
  EXPECT_EQ(s.peak_bytes, s0.current_bytes + (size_t{1} << 40) + 12);
  EXPECT_EQ(s.num_frees, s0.num_frees + 2);
  EXPECT_EQ(m.allocate(0).device(), kMeta);
}

TEST(GetAllocator, DevicesWithoutARuntimeAreNotSupported) {
  try {
    get_allocator(Device(DeviceType::kXPU, 0));
    FAIL() << "xpu allocator returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_THAT(e.message(), HasSubstr("xpu"));
  }
  if (!is_runtime_built(DeviceType::kHIP)) {
    EXPECT_THROW(get_allocator(Device(DeviceType::kHIP, 0)), Error);
  }
  try {
    get_allocator(Device(DeviceType::kCPU, 1));
    FAIL() << "cpu:1 allocator returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("cpu:1"));
  }
}

TEST(CpuAllocatorEnv, CacheCanBeDisabled) {
  PatchEnvironment env{{"BRAID_CPU_ALLOCATOR_CACHE", 0}};
  EXPECT_EQ(run_child_test("CpuAllocatorEnvChild.NoCaching"), kChildPassed);
}

TEST(CpuAllocatorEnv, BadValueIsRejected) {
  PatchEnvironment env{{"BRAID_CPU_ALLOCATOR_CACHE", "sometimes"}};
  EXPECT_EQ(run_child_test("CpuAllocatorEnvChild.BadValueThrows"), kChildPassed);
}

TEST(CpuAllocatorEnvChild, NoCaching) {
  if (!in_child()) GTEST_SKIP() << "runs as a child of CpuAllocatorEnv.CacheCanBeDisabled";
  Allocator& a = get_allocator(kCPU);
  const AllocatorStats s0 = a.stats();
  { DataPtr p = a.allocate(1000); }
  EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes);  // returned at once
  { DataPtr p = a.allocate(1000); }
  EXPECT_EQ(a.stats().cache_hits, s0.cache_hits);
  EXPECT_EQ(a.stats().num_allocations, s0.num_allocations + 2);
  exit_child();
}

TEST(CpuAllocatorEnvChild, BadValueThrows) {
  if (!in_child()) GTEST_SKIP() << "runs as a child of CpuAllocatorEnv.BadValueIsRejected";
  try {
    get_allocator(kCPU);
    ADD_FAILURE() << "BRAID_CPU_ALLOCATOR_CACHE=sometimes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("BRAID_CPU_ALLOCATOR_CACHE"));
    EXPECT_THAT(e.message(), HasSubstr("sometimes"));
  }
  exit_child();
}

}  // namespace
}  // namespace braid
