// The shm backend's small broadcasts (docs/shm.md, "Small broadcasts"; Note [Small broadcast]
// in comm/src/shm_broadcast.cc): at 1, 2, 3, 4 and 8 ranks (threads and forked processes),
// every root, sizes on both sides of the path's limit, in place and out of place, many more
// calls than the ring has cells (so every cell is reused under every root), mixed with step
// calls; and the mismatches the path must still report: a receiver whose call differs from the
// root's, a small broadcast where a peer makes another collective, ranks that all believe they
// are the root. Also that a rank maps the pages it uses outside the arenas when it joins.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../src/shm_backend.h"
#include "../src/shm_group.h"
#include "../src/shm_segment.h"
#include "../src/wait_policy.h"
#include "braid/comm/store.h"
#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "comm_test_util.h"
#include "shm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

using shm_test::make_backend;
using shm_test::run;

std::string unique_job() {
  return shm_test::unique_job("sb");
}

// The value element i of call k carries when rank `root` sends it.
int32_t value(int k, int root, int64_t i) {
  return k * 100003 + root * 1009 + static_cast<int32_t>(i);
}

// Counts (i32) around the cell's inline limit (80 bytes, 20 i32) and a path limit of 4096 bytes
// (1024 i32), one data slot.
const std::vector<int64_t> kAroundOneSlot = {0, 1, 3, 4, 5, 16, 17, 20, 21, 255, 1024, 1025, 2};
// Counts that take several data slots under a limit of shm::kBcastMaxBytes (65536 i32), the
// limit itself, one past it (the step protocol) and a slot: the messages wrap the ring of 256
// slots at a different place each turn, and each root waits for slots its receivers are still
// reading.
const std::vector<int64_t> kManySlots = {1025, 65536, 16384, 40000, 65537, 3, 1024, 20000, 4097};

// Options whose path limit is `bytes`, whether or not the group has more ranks than CPUs.
ShmOptions bcast_limit(uint64_t bytes) {
  ShmOptions o;
  o.bcast_bytes = o.bcast_shared_bytes = bytes;
  return o;
}

// Call k of the sequence: a broadcast of counts[k % size] from root k % n, in place every other
// call; every 7th call an all_reduce (a step call between small broadcasts). `within` (when
// given) counts the broadcasts of at most `limit` bytes.
void run_sequence(int me, int n, Backend& b, int calls,
                  const std::vector<int64_t>& counts = kAroundOneSlot, uint64_t limit = 0,
                  uint32_t* within = nullptr) {
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<int32_t> send(static_cast<size_t>(most)), recv(static_cast<size_t>(most));
  for (int k = 0; k < calls; ++k) {
    CollectiveDesc d;
    d.dtype = DType::kI32;
    d.seq = static_cast<uint64_t>(k + 1);
    if (k % 7 == 6) {
      d.kind = CollectiveKind::kAllReduce;
      d.count = 3;
      std::vector<int32_t> x(3, me + k), y(3, -1);
      d.send = x.data();
      d.recv = y.data();
      run(b, d);
      for (int32_t v : y) ASSERT_EQ(v, n * k + n * (n - 1) / 2) << "all_reduce, call " << k;
      continue;
    }
    d.kind = CollectiveKind::kBroadcast;
    d.root = k % n;
    d.count = counts[k % counts.size()];
    const bool in_place = k % 2 == 0;
    if (within && static_cast<uint64_t>(d.count) * sizeof(int32_t) <= limit) ++*within;
    for (int64_t i = 0; i < d.count; ++i) {
      send[i] = me == d.root ? value(k, d.root, i) : -7;
      recv[i] = -9;
    }
    d.send = send.data();
    d.recv = in_place ? send.data() : recv.data();
    run(b, d);
    const int32_t* out = in_place ? send.data() : recv.data();
    for (int64_t i = 0; i < d.count; ++i) {
      ASSERT_EQ(out[i], value(k, d.root, i))
          << "call " << k << ", root " << d.root << ", count " << d.count << ", element " << i
          << (in_place ? ", in place" : ", out of place") << ", rank " << me;
    }
    if (me == d.root && !in_place) {  // the root's send buffer stays as it was
      for (int64_t i = 0; i < d.count; ++i) ASSERT_EQ(send[i], value(k, d.root, i));
    }
  }
}

// Whether this process maps the page at `addr` now (/proc/self/pagemap, bit 63).
bool page_present(const void* addr) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return false;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(addr) / 4096 * sizeof entry);
  const bool read = ::pread(fd, &entry, sizeof entry, at) == static_cast<ssize_t>(sizeof entry);
  ::close(fd);
  return read && (entry >> 63) != 0;
}

// The first use of a page of a staging ring took a page fault in the timed calls (4-rank
// all_gather of 8 KiB a rank: 20-25 us on the ring's first turn, 6 after it): a rank maps
// every page it uses outside the arenas when it joins.
TEST(ShmSegment, TouchPagesMapsEveryPageARankUsesOutsideTheArenas) {
  const std::string name = "/braid-touch-" + std::to_string(getpid());
  const int n = 3, me = 1;
  shm::SegmentConfig config;
  config.slot_bytes = 64 << 10;
  config.mailbox_bytes = 8 << 10;
  config.arena_bytes = 4096;
  auto created = shm::Segment::create(name, n, config);
  // A second mapping of the object, as a peer process has: none of its pages is mapped yet.
  auto seg = shm::Segment::open(name, n);
  ::shm_unlink(name.c_str());
  const uint64_t slot_bytes = shm::slot_region_bytes(config.slot_bytes);
  ASSERT_FALSE(page_present(seg->slot(2) + slot_bytes - 1)) << "mapped before touch_pages";
  seg->touch_pages(me);
  auto expect_mapped = [&](const uint8_t* p, uint64_t bytes, const std::string& what) {
    for (uint64_t off = 0; off < bytes; off += 4096) {
      ASSERT_TRUE(page_present(p + off)) << what << ", byte " << off;
    }
    ASSERT_TRUE(page_present(p + bytes - 1)) << what << ", last byte";
  };
  for (int r = 0; r < n; ++r) {
    expect_mapped(seg->slot(r), slot_bytes, "rank " + std::to_string(r) + "'s slot");
    expect_mapped(seg->bcast_slot(r, 0), uint64_t{shm::kBcastSlots} * shm::kBcastCellBytes,
                  "rank " + std::to_string(r) + "'s broadcast data slots");
    expect_mapped(seg->mailbox_data(me, r), config.mailbox_bytes,
                  "mailbox " + std::to_string(me) + " -> " + std::to_string(r));
    expect_mapped(seg->mailbox_data(r, me), config.mailbox_bytes,
                  "mailbox " + std::to_string(r) + " -> " + std::to_string(me));
  }
}

// (processes, ranks)
class ShmSmallBroadcast : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ShmSmallBroadcast, EveryRootSizeAndPlacementThroughManyRingTurns) {
  const auto [processes, n] = GetParam();
  const std::string job = unique_job();
  const testing::RankFn fn = [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(60000), bcast_limit(4096));
    // Three turns of the ring of cells (many of the data slots) at 8 ranks, more at fewer.
    run_sequence(me, size, *b, 3 * shm::kBcastCells * std::max(1, 4 / size) + 5);
    CollectiveDesc barrier;  // the digests of every small broadcast are compared here
    barrier.kind = CollectiveKind::kBarrier;
    run(*b, barrier);
  };
  auto result = processes ? testing::run_processes(n, fn) : testing::run_threads(n, fn);
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Messages of several data slots (the path's default limit with more ranks than CPUs).
TEST_P(ShmSmallBroadcast, ManySlotMessagesThroughManyRingTurns) {
  const auto [processes, n] = GetParam();
  const std::string job = unique_job();
  const testing::RankFn fn = [&](int me, int size, std::shared_ptr<Store> store) {
    auto b =
        make_backend(me, size, store, job, milliseconds(60000), bcast_limit(shm::kBcastMaxBytes));
    uint32_t within = 0;
    run_sequence(me, size, *b, 120, kManySlots, shm::kBcastMaxBytes, &within);
    // Every message up to the limit took the path, the one past it the step protocol.
    EXPECT_EQ(dynamic_cast<shm::ShmGroup&>(*b).small_broadcasts(), within) << "rank " << me;
    EXPECT_GT(within, 0u);
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(*b, barrier);
  };
  auto result = processes ? testing::run_processes(n, fn) : testing::run_threads(n, fn);
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, ShmSmallBroadcast,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4, 8)));

// The options' limits reach the group: rank 0's bcast_bytes where every rank has a CPU of its
// own, its bcast_shared_bytes where the ranks outnumber them (each read back from the segment
// header through the path taken: a broadcast of one byte more than the limit takes a step).
TEST(ShmSmallBroadcast, TheGroupTakesRankZerosLimitForItsShareOfCpus) {
  ShmOptions defaults;
  EXPECT_EQ(defaults.bcast_bytes, uint64_t{16} << 10);
  EXPECT_EQ(defaults.bcast_shared_bytes, uint64_t{256} << 10);
  ShmOptions o;
  o.bcast_bytes = 8192;
  o.bcast_shared_bytes = 131072;
  const int cpus = usable_cpus();
  for (const int n : {1, cpus + 1}) {
    if (n > 16) continue;  // the second group would need as many threads as CPUs and one more
    const std::string job = unique_job();
    auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
      // Rank 0's options decide: the others pass the defaults.
      auto b = make_backend(me, size, store, job, milliseconds(60000), me == 0 ? o : defaults);
      EXPECT_EQ(dynamic_cast<shm::ShmGroup&>(*b).small_broadcast_limit(),
                size > cpus ? o.bcast_shared_bytes : o.bcast_bytes)
          << size << " ranks on " << cpus << " CPUs";
    });
    EXPECT_TRUE(result.ok()) << result.summary();
  }
  if (cpus + 1 > 16) GTEST_SKIP() << "checked one rank only: " << cpus << " CPUs";
}

// A message of up to shm::kBcastInlineBytes travels in the cell's two lines, a larger one in a
// data slot (a page of its own): 64 bytes took a fresh page each call, which on a VM costs up to
// hundreds of microseconds where the page sat idle (docs/shm.md, "Small broadcasts").
TEST(ShmSmallBroadcast, UpToEightyBytesTravelInTheCell) {
  ASSERT_EQ(shm::kBcastInlineBytes, 80);
  const std::string job = unique_job();
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(60000));
    auto& group = dynamic_cast<shm::ShmGroup&>(*b);
    uint32_t slots = 0;
    for (const int64_t count : {4, 5, 16, 20, 21, 64, 20}) {  // i32: 16 ... 256 bytes
      std::vector<int32_t> buf(static_cast<size_t>(count), me == 0 ? 7 : -1);
      CollectiveDesc d;
      d.kind = CollectiveKind::kBroadcast;
      d.dtype = DType::kI32;
      d.count = count;
      d.send = d.recv = buf.data();
      run(*b, d);
      for (int32_t v : buf) ASSERT_EQ(v, 7) << count << " i32, rank " << me;
      if (me == 0 && count * 4 > shm::kBcastInlineBytes) ++slots;
      EXPECT_EQ(group.small_broadcasts_in_slots(), slots) << "after " << count * 4 << " bytes";
    }
    EXPECT_EQ(group.small_broadcasts(), 7u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// A root whose receivers have read every earlier message starts over at data slot 0, so that
// sparse broadcasts keep to a few pages (docs/shm.md, "Small broadcasts"); one that runs ahead
// of them goes on round the ring.
TEST(ShmSmallBroadcast, ARootWhoseReceiversCaughtUpKeepsToTheFirstSlots) {
  const std::string job = unique_job();
  auto result = testing::run_threads(3, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(60000));
    auto& group = dynamic_cast<shm::ShmGroup&>(*b);
    std::vector<int32_t> buf(64);  // 256 bytes: a data slot each
    for (int k = 0; k < 100; ++k) {
      CollectiveDesc d;
      d.kind = CollectiveKind::kBroadcast;
      d.dtype = DType::kI32;
      d.count = 64;
      std::fill(buf.begin(), buf.end(), me == 0 ? k : -1);
      d.send = d.recv = buf.data();
      run(*b, d);
      for (int32_t v : buf) ASSERT_EQ(v, k) << "call " << k << ", rank " << me;
      CollectiveDesc barrier;  // every receiver has read message k
      barrier.kind = CollectiveKind::kBarrier;
      run(*b, barrier);
      if (me == 0) {
        ASSERT_LE(group.small_broadcast_next_slot(), shm::kBcastCheckSlots + 1) << "call " << k;
      }
    }
    EXPECT_EQ(group.small_broadcasts_in_slots(), me == 0 ? 100u : 0u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// With the path off every broadcast takes the step protocol: the same results.
TEST(ShmSmallBroadcast, OffGivesTheSameResults) {
  const std::string job = unique_job();
  const ShmOptions o = bcast_limit(0);
  auto result = testing::run_threads(3, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(60000), o);
    run_sequence(me, size, *b, 60);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Note [Small broadcast by reference]: messages of shm::kBcastByReferenceBytes and more whose
// root buffer lies on huge pages (braid's cpu allocator, blocks of 4 MiB) are read there by the
// receivers; smaller ones and buffers on 4 KiB pages take the ring. Every root, in place and
// out of place; the root scribbles over its buffer as soon as its call returns, so a root that
// returned before its receivers had read would leave them the scribble. Results exact.
// (processes, ranks)
class ShmBroadcastByReference : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ShmBroadcastByReference, ReceiversReadHugePageBuffersInPlace) {
  const auto [processes, n] = GetParam();
  const std::string job = unique_job();
  const testing::RankFn fn = [&](int me, int size, std::shared_ptr<Store> store) {
    auto b =
        make_backend(me, size, store, job, milliseconds(60000), bcast_limit(shm::kBcastMaxBytes));
    auto& group = dynamic_cast<shm::ShmGroup&>(*b);
    const size_t block_bytes = size_t{4} << 20;
    DataPtr block = get_allocator(kCPU).allocate(block_bytes);
    auto* huge = static_cast<int32_t*>(block.get());
    const bool on_huge_pages = cpu_memory_on_huge_pages(huge, block_bytes);
    std::vector<int32_t> heap(shm::kBcastMaxBytes / 4), other(shm::kBcastMaxBytes / 4);
    const int64_t at_least = shm::kBcastByReferenceBytes / 4;
    const int64_t counts[] = {at_least, at_least - 1, shm::kBcastMaxBytes / 4, 40000, 1000};
    uint32_t by_reference = 0;
    // A root reads its receivers by reference once it has seen every rank's answer to whether
    // it offers process_vm_readv, published when it joined: after a first call, every rank has.
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(*b, barrier);
    for (int k = 0; k < 60; ++k) {
      CollectiveDesc d;
      d.kind = CollectiveKind::kBroadcast;
      d.dtype = DType::kI32;
      d.seq = static_cast<uint64_t>(k + 1);
      d.root = k % size;
      d.count = counts[k % 5];
      const bool in_place = (k / 5) % 2 == 0;
      const bool on_heap = k % 11 == 10;  // a root buffer of 4 KiB pages: the ring
      int32_t* send = on_heap ? heap.data() : huge;
      int32_t* recv = in_place ? send : (on_heap ? other.data() : huge + block_bytes / 8);
      for (int64_t i = 0; i < d.count; ++i) {
        send[i] = me == d.root ? value(k, d.root, i) : -7;
        if (!in_place) recv[i] = -9;
      }
      d.send = send;
      d.recv = recv;
      run(*b, d);
      for (int64_t i = 0; i < d.count; ++i) {
        ASSERT_EQ(recv[i], value(k, d.root, i))
            << "call " << k << ", root " << d.root << ", count " << d.count << ", element " << i
            << (in_place ? ", in place" : ", out of place") << (on_heap ? ", heap" : ", block")
            << ", rank " << me;
      }
      if (me == d.root) {
        std::fill(send, send + d.count, -5);  // the receivers have read it: the call returned
        if (d.count >= at_least && !on_heap && on_huge_pages && size > 1) ++by_reference;
      }
      EXPECT_EQ(group.small_broadcasts_by_reference(), by_reference) << "call " << k;
    }
    EXPECT_EQ(group.small_broadcasts(), 60u);
    if (on_huge_pages && size > 1) {
      EXPECT_GT(by_reference, 0u);
    }
    run(*b, barrier);
  };
  auto result = processes ? testing::run_processes(n, fn) : testing::run_threads(n, fn);
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, ShmBroadcastByReference,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4)));

// A rank that does not offer its memory to process_vm_readv (its BRAID_SHM_KERNEL_COPY_BYTES
// is 0) keeps every root on the ring: the same results.
TEST(ShmBroadcastByReferenceOff, ARankWithoutTheKernelCopyKeepsTheRing) {
  const std::string job = unique_job();
  auto result = testing::run_threads(3, [&](int me, int size, std::shared_ptr<Store> store) {
    ShmOptions o = bcast_limit(shm::kBcastMaxBytes);
    if (me == 1) o.kernel_copy_bytes = 0;
    auto b = make_backend(me, size, store, job, milliseconds(60000), o);
    auto& group = dynamic_cast<shm::ShmGroup&>(*b);
    DataPtr block = get_allocator(kCPU).allocate(size_t{4} << 20);
    auto* buf = static_cast<int32_t*>(block.get());
    for (int k = 0; k < 6; ++k) {
      CollectiveDesc d;
      d.kind = CollectiveKind::kBroadcast;
      d.dtype = DType::kI32;
      d.root = k % size;
      d.count = shm::kBcastMaxBytes / 4;
      for (int64_t i = 0; i < d.count; ++i) buf[i] = me == d.root ? value(k, d.root, i) : -7;
      d.send = d.recv = buf;
      run(*b, d);
      for (int64_t i = 0; i < d.count; ++i) {
        ASSERT_EQ(buf[i], value(k, d.root, i)) << "call " << k << ", rank " << me;
      }
    }
    EXPECT_EQ(group.small_broadcasts(), 6u);
    EXPECT_EQ(group.small_broadcasts_by_reference(), 0u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

std::vector<std::optional<Error>> errors_of(int n, milliseconds timeout,
                                            const std::function<void(int, Backend&)>& fn) {
  return shm_test::errors_of(n, timeout, unique_job(), fn);
}

CollectiveDesc bcast(std::vector<float>& buf, int64_t count, int root) {
  CollectiveDesc d;
  d.kind = CollectiveKind::kBroadcast;
  d.send = d.recv = buf.data();
  d.count = count;
  d.root = root;
  return d;
}

TEST(ShmSmallBroadcastErrors, AReceiverWhoseCallDiffersFromTheRootsNamesBoth) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    run(b, bcast(buf, me == 2 ? 8 : 4, 0));
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(b, barrier);
  });
  ASSERT_TRUE(errors[2].has_value());
  EXPECT_EQ(errors[2]->kind(), ErrorKind::kInvalidArgument) << errors[2]->what();
  const std::string msg = errors[2]->message();
  EXPECT_NE(msg.find("group rank 2 (world rank 12) called broadcast f32 x 8 root 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("group rank 0 (world rank 10) called broadcast f32 x 4 root 0"),
            std::string::npos)
      << msg;
  // The others fail at the barrier: rank 2 left the group.
  for (int r : {0, 1}) {
    ASSERT_TRUE(errors[r].has_value()) << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kPeerLost) << errors[r]->what();
  }
}

// A receiver of a small broadcast whose root makes another collective: both wait for a peer
// that never comes, and both name the two calls (in the wait's slow path, not at the timeout).
TEST(ShmSmallBroadcastErrors, ASmallBroadcastAgainstAnotherCollectiveIsAMismatchOnEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 16;
    if (me == 2) d = bcast(buf, 16, 1);  // rank 1 makes the all_reduce
    run(b, d);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    const std::string msg = errors[r]->message();
    EXPECT_NE(msg.find("all_reduce f32 x 16 sum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broadcast f32 x 16 root 1"), std::string::npos) << msg;
  }
}

// The root of a small broadcast waits for nobody: the peers that make another collective find
// its broadcast in its record and name it; the root learns at its next call.
TEST(ShmSmallBroadcastErrors, ARootThatBroadcastsWhereOthersReduceIsNamedByThem) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    CollectiveDesc d;
    d.send = d.recv = buf.data();
    d.count = 16;
    if (me == 0) d = bcast(buf, 16, 0);
    run(b, d);
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(b, barrier);
  });
  // Ranks 1 and 2 name rank 0's broadcast, or its barrier when rank 0 reached it first (then
  // the calls' indices differ at the step's check).
  for (int r : {1, 2}) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    const std::string msg = errors[r]->message();
    EXPECT_TRUE(msg.find("group rank 0 (world rank 10) called broadcast f32 x 16") !=
                    std::string::npos ||
                msg.find("group rank 0 (world rank 10) called barrier") != std::string::npos)
        << msg;
  }
  ASSERT_TRUE(errors[0].has_value());  // at its barrier
}

// Two ranks that both believe they are the root wait for nobody; the digest compared at the
// next step call reports it on both.
TEST(ShmSmallBroadcastErrors, RanksThatAllBelieveTheyAreTheRootFailAtTheNextCall) {
  auto errors = errors_of(2, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(4, 1.f);
    for (int k = 0; k < 3; ++k) run(b, bcast(buf, 4, k == 1 ? me : 0));
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(b, barrier);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    EXPECT_NE(errors[r]->message().find("small broadcasts"), std::string::npos)
        << errors[r]->message();
  }
}

// Two ranks that both believe they are the root of a broadcast read by reference wait for each
// other's reads: each finds the other's small broadcast at the same call in its record and names
// both calls, long before the deadline.
TEST(ShmSmallBroadcastErrors, RootsByReferenceThatWaitForEachOtherNameTheMismatch) {
  const auto start = std::chrono::steady_clock::now();
  const std::string job = unique_job();
  std::vector<std::optional<Error>> errors(2);
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b =
        make_backend(me, size, store, job, milliseconds(20000), bcast_limit(shm::kBcastMaxBytes));
    DataPtr block = get_allocator(kCPU).allocate(size_t{4} << 20);
    CollectiveDesc d;
    d.kind = CollectiveKind::kBroadcast;
    d.send = d.recv = block.get();
    d.count = shm::kBcastMaxBytes / 4;
    d.root = me;
    CollectiveDesc barrier;  // every rank has joined: the roots read by reference
    barrier.kind = CollectiveKind::kBarrier;
    run(*b, barrier);
    try {
      run(*b, d);
      run(*b, barrier);
    } catch (const Error& e) {
      errors[me] = e;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
  }
  const std::string msg = errors[0]->message();
  EXPECT_NE(msg.find("broadcast f32 x 65536 root 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("broadcast f32 x 65536 root 1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace braid
