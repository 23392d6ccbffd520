// The shm backend's small reduces (docs/shm.md, "Small reduces"; Note [Small reduce] in
// comm/src/shm_broadcast.cc): at 1, 2, 3, 4 and 8 ranks (threads and forked processes), every
// root, op and dtype, sizes on both sides of the inline limit, of a chunk (several chunks, a
// short last one) and of the test's limit, in place and out of place, many more calls than the
// ring has cells, mixed with small broadcasts and step calls, bit for bit against the same calls
// through the step protocol (a second group with the path off); contributors that return
// without waiting for the root; contributions read in place in their writers' arenas; the
// limit; and the mismatches and timeouts the path must still report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../src/shm_backend.h"
#include "../src/shm_group.h"
#include "../src/shm_segment.h"
#include "../src/wait_policy.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "comm_test_util.h"
#include "shm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

using shm_test::make_backend;
using shm_test::run;

std::string unique_job() {
  return shm_test::unique_job("sr");
}

shm::ShmGroup& group_of(Backend& b) {
  return dynamic_cast<shm::ShmGroup&>(b);
}

// Options whose small-reduce (and small-broadcast) limit is `bytes`, whether or not the group
// has more ranks than CPUs.
ShmOptions reduce_limit(uint64_t bytes) {
  ShmOptions o;
  o.reduce_bytes = bytes;
  o.bcast_bytes = o.bcast_shared_bytes = std::min<uint64_t>(bytes, shm::kBcastMaxBytes);
  return o;
}

// Byte counts around the cell's inline limit (80 bytes), one data slot (4096) and several, a
// chunk (shm::kReduceChunkBytes, 64 KiB) and several with a short last one, up to the path's
// largest (the test's limit, 4 MiB) and one element past it (the step protocol).
constexpr int64_t kMost = int64_t{4} << 20;
const std::vector<int64_t> kBytes = {16,   4,  80,    88,      256,   4096,   4104,
                                     2,    64, 8192,  65536,   65544, 262152, kMost - 8,
                                     1024, 0,  40000, 1 << 20, kMost, 88,     kMost + 8};

struct Kind {
  DType dtype;
  ReduceOp op;
};
const Kind kKinds[] = {{DType::kF32, ReduceOp::kSum},  {DType::kBF16, ReduceOp::kAvg},
                       {DType::kI32, ReduceOp::kProd}, {DType::kF64, ReduceOp::kMin},
                       {DType::kF16, ReduceOp::kMax},  {DType::kI64, ReduceOp::kSum}};

// Rank r's contribution to call k: values whose fold depends on the order (floats of mixed
// magnitude), small integers for prod.
void fill(std::vector<uint8_t>& buf, DType dtype, int64_t count, int k, int r) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t s = (k * 7919 + r * 104729 + i * 31) % 1000;
    const double x = (s - 500) * (s % 3 == 0 ? 1e-3 : 1.7) + r;
    switch (dtype) {
      case DType::kF32: {
        const float v = static_cast<float>(x);
        std::memcpy(buf.data() + i * 4, &v, 4);
        break;
      }
      case DType::kF64:
        std::memcpy(buf.data() + i * 8, &x, 8);
        break;
      case DType::kBF16:
      case DType::kF16: {
        // A float's upper half (bf16) or any pattern of a finite half: 0x3c00 + small offsets.
        const float v = static_cast<float>(x);
        uint32_t bits = 0;
        std::memcpy(&bits, &v, 4);
        const uint16_t h = dtype == DType::kBF16 ? static_cast<uint16_t>(bits >> 16)
                                                 : static_cast<uint16_t>(0x3000 + s * 11);
        std::memcpy(buf.data() + i * 2, &h, 2);
        break;
      }
      case DType::kI32: {
        const int32_t v = static_cast<int32_t>(s % 5) - 2 + (r == 0 ? 1 : 0);
        std::memcpy(buf.data() + i * 4, &v, 4);
        break;
      }
      case DType::kI64: {
        const int64_t v = s * 1000003 - r;
        std::memcpy(buf.data() + i * 8, &v, 8);
        break;
      }
      default:
        FAIL() << "no fill for " << dtype;
    }
  }
}

// Call k of the sequence on both groups (`small`: the path at `limit`; `steps`: the path off):
// a reduce from root k % n of kBytes[k % ...] (rounded down to the dtype), in place every other
// call; every 5th call a small broadcast and every 7th an all_reduce between them. The root's
// results must be equal bit for bit, and a non-root's recv untouched. Returns the reduces of at
// most `limit` bytes.
uint32_t run_sequence(int me, int n, Backend& small, Backend& steps, int calls, uint64_t limit) {
  uint32_t within = 0;
  const size_t most = kMost + 16;
  std::vector<uint8_t> send(most), recv(most), send2(most), recv2(most);
  for (int k = 0; k < calls; ++k) {
    CollectiveDesc d;
    d.seq = static_cast<uint64_t>(k + 1);
    if (k % 7 == 6 || k % 5 == 4) {
      // A step call or a small broadcast between the reduces (same on both groups).
      d.kind = k % 7 == 6 ? CollectiveKind::kAllReduce : CollectiveKind::kBroadcast;
      d.dtype = DType::kI32;
      d.count = 3;
      d.root = (k / 5) % n;
      std::vector<int32_t> x(3, me + k), y(3, -1);
      d.send = x.data();
      d.recv = y.data();
      run(small, d);
      if (d.kind == CollectiveKind::kAllReduce) {
        for (int32_t v : y) EXPECT_EQ(v, n * k + n * (n - 1) / 2) << "all_reduce, call " << k;
      } else {
        for (int32_t v : y) EXPECT_EQ(v, d.root + k) << "broadcast, call " << k;
      }
      continue;
    }
    const Kind kind = kKinds[k % 6];
    const int64_t es = static_cast<int64_t>(dtype_size(kind.dtype));
    d.kind = CollectiveKind::kReduce;
    d.dtype = kind.dtype;
    d.op = kind.op;
    d.root = k % n;
    d.count = kBytes[k % kBytes.size()] / es;
    const bool in_place = k % 2 == 0;
    const int64_t bytes = d.count * es;
    if (static_cast<uint64_t>(bytes) <= limit) ++within;
    fill(send, kind.dtype, d.count, k, me);
    std::memcpy(send2.data(), send.data(), static_cast<size_t>(bytes));
    std::fill(recv.begin(), recv.begin() + bytes, uint8_t{0xa5});
    std::fill(recv2.begin(), recv2.begin() + bytes, uint8_t{0xa5});
    d.send = send.data();
    d.recv = in_place ? send.data() : recv.data();
    run(small, d);
    d.send = send2.data();
    d.recv = in_place ? send2.data() : recv2.data();
    run(steps, d);
    const uint8_t* got = in_place ? send.data() : recv.data();
    const uint8_t* want = in_place ? send2.data() : recv2.data();
    for (int64_t i = 0; i < bytes; ++i) {
      if (got[i] != want[i]) {
        ADD_FAILURE() << "call " << k << ": reduce " << kind.dtype << " x " << d.count << " "
                      << reduce_op_name(kind.op) << " root " << d.root
                      << (in_place ? " in place" : " out of place") << ", rank " << me << ": byte "
                      << i << " is " << int{got[i]} << ", the step path's " << int{want[i]};
        return within;
      }
      if (me != d.root && !in_place && got[i] != 0xa5) {
        ADD_FAILURE() << "call " << k << ": a non-root's recv changed, rank " << me;
        return within;
      }
    }
  }
  return within;
}

// (processes, ranks)
class ShmSmallReduce : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ShmSmallReduce, EveryRootOpAndSizeGivesTheStepPathsBitsThroughManyRingTurns) {
  const auto [processes, n] = GetParam();
  const std::string job = unique_job();
  const testing::RankFn fn = [&](int me, int size, std::shared_ptr<Store> store) {
    const uint64_t limit = kMost;
    auto small = make_backend(me, size, store, job, milliseconds(60000), reduce_limit(limit));
    auto steps = make_backend(me, size, store, job, milliseconds(60000), reduce_limit(0));
    // Over three turns of the ring of cells (and many of the data slots) at 8 ranks.
    const int calls = 3 * shm::kBcastCells * 7 / 4 * std::max(1, 4 / size) + 11;
    const uint32_t within = run_sequence(me, size, *small, *steps, calls, limit);
    EXPECT_EQ(group_of(*small).small_reduces(), within) << "rank " << me;
    EXPECT_EQ(group_of(*steps).small_reduces(), 0u) << "rank " << me;
    EXPECT_GT(within, 0u);
    CollectiveDesc barrier;  // the digests of every small call are compared here
    barrier.kind = CollectiveKind::kBarrier;
    run(*small, barrier);
  };
  auto result = processes ? testing::run_processes(n, fn) : testing::run_threads(n, fn);
  EXPECT_TRUE(result.ok()) << result.summary();
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, ShmSmallReduce,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4, 8)));

// The contributors of a small reduce write their ring and return: they make 200 reduces (fewer
// than the ring's cells) before the root has made one, and the root then folds them all.
TEST(ShmSmallReduceAhead, ContributorsReturnWithoutWaitingForTheRoot) {
  constexpr int kCalls = 200;
  static_assert(kCalls < shm::kBcastCells);
  const std::string job = unique_job();
  std::atomic<int> ahead{0};
  auto result = testing::run_threads(3, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(20000));
    auto reduce = [&](int k) {
      std::vector<int64_t> x(5, (me + 1) * 1000 + k), y(5, -1);
      CollectiveDesc d;
      d.kind = CollectiveKind::kReduce;
      d.dtype = DType::kI64;
      d.count = 5;
      d.root = 0;
      d.send = x.data();
      d.recv = y.data();
      run(*b, d);
      if (me == 0) {
        for (int64_t v : y) ASSERT_EQ(v, 6000 + 3 * k) << "call " << k;
      }
    };
    if (me != 0) {
      for (int k = 0; k < kCalls; ++k) reduce(k);
      ahead.fetch_add(1);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (ahead.load() < size - 1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      ASSERT_EQ(ahead.load(), size - 1) << "the contributors waited for the root";
      for (int k = 0; k < kCalls; ++k) reduce(k);
    }
    EXPECT_EQ(group_of(*b).small_reduces(), static_cast<uint32_t>(kCalls));
    CollectiveDesc barrier;
    barrier.kind = CollectiveKind::kBarrier;
    run(*b, barrier);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// A contribution of 64-256 KiB in its writer's arena is read there by the root (one copy
// fewer), and its writer returns only once the root has read it: each contributor scribbles
// over its buffer as soon as its call returns, while the root enters late, so a contributor
// that returned early would leave the root the scribble. Smaller ones, larger ones and buffers
// outside the arena are copied. Results exact (integers).
TEST(ShmSmallReduceArena, TheRootReadsArenaContributionsInPlaceAndTheirWritersWait) {
  const std::string job = unique_job();
  auto result = testing::run_threads(3, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, milliseconds(60000));
    auto& group = group_of(*b);
    const int64_t most = (int64_t{1} << 20) / 8;  // 1 MiB of i64
    auto* shared = static_cast<int64_t*>(b->allocate(static_cast<size_t>(most) * 8));
    ASSERT_NE(shared, nullptr);
    std::vector<int64_t> heap(static_cast<size_t>(most)), out(static_cast<size_t>(most));
    uint32_t from_arena = 0;
    int k = 0;
    for (const int64_t count :
         {int64_t{8192}, int64_t{32768}, int64_t{4096}, most, int64_t{9000}}) {
      for (const bool in_arena : {true, false}) {
        int64_t* send = in_arena ? shared : heap.data();
        for (int64_t i = 0; i < count; ++i) send[i] = (me + 1) * 1000003 + k * 31 + i;
        CollectiveDesc d;
        d.kind = CollectiveKind::kReduce;
        d.dtype = DType::kI64;
        d.count = count;
        d.root = 0;
        d.send = send;
        d.recv = out.data();
        if (me == 0) std::this_thread::sleep_for(milliseconds(20));  // the contributors go first
        run(*b, d);
        if (me != 0) {
          std::fill(send, send + count, int64_t{-5});
          const int64_t bytes = count * 8;
          if (in_arena && bytes >= 65536 && bytes <= shm::kReduceArenaMaxBytes) ++from_arena;
        } else {
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(out[i], 6 * 1000003 + 3 * (k * 31 + i))
                << "call " << k << ", " << count << " i64, element " << i
                << (in_arena ? ", arena" : ", heap");
          }
        }
        EXPECT_EQ(group.small_reduces_from_arena(), from_arena) << "call " << k << ", rank " << me;
        ++k;
      }
    }
    EXPECT_EQ(group.small_reduces(), static_cast<uint32_t>(k));
    if (me != 0) {
      EXPECT_EQ(from_arena, 3u);  // 64, 72 and 256 KiB in the arena
    }
    b->release(shared);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Rank 0's limit reaches the group, with a CPU per rank or not: a reduce at the limit takes the
// path, one element more a step; premul_sum, whose factors travel with a step call, always
// steps.
TEST(ShmSmallReduceLimits, RankZerosLimitDecidesAndPremulSumSteps) {
  ShmOptions defaults;
  EXPECT_EQ(defaults.reduce_bytes, ~uint64_t{0});  // every size
  ShmOptions o;
  o.reduce_bytes = 8192;
  const int cpus = usable_cpus();
  for (const int n : {2, cpus + 1}) {
    if (n > 16) continue;  // the second group would need as many threads as CPUs and one more
    const std::string job = unique_job();
    auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
      auto b = make_backend(me, size, store, job, milliseconds(60000), me == 0 ? o : defaults);
      auto& group = group_of(*b);
      EXPECT_EQ(group.small_reduce_limit(), o.reduce_bytes)
          << size << " ranks, " << cpus << " CPUs";
      const int64_t at_limit = static_cast<int64_t>(o.reduce_bytes / 4);
      std::vector<float> x(static_cast<size_t>(at_limit + 1)), y(x.size());
      uint32_t small = 0;
      for (const int64_t count : {at_limit, at_limit + 1, int64_t{4}}) {
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kPremulSum}) {
          std::fill(x.begin(), x.end(), static_cast<float>(me + 1));
          CollectiveDesc d;
          d.kind = CollectiveKind::kReduce;
          d.count = count;
          d.op = op;
          d.premul_factor = 0.5 * (me + 1);
          d.root = size - 1;
          d.send = x.data();
          d.recv = y.data();
          run(*b, d);
          if (count <= at_limit && op != ReduceOp::kPremulSum) ++small;
          EXPECT_EQ(group.small_reduces(), small)
              << count << " f32 " << reduce_op_name(op) << ", rank " << me;
          if (me != d.root) continue;
          double want = 0;  // sum of (r+1), or of 0.5 (r+1)^2
          for (int r = 0; r < size; ++r) {
            want += op == ReduceOp::kSum ? r + 1 : 0.5 * (r + 1) * (r + 1);
          }
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(y[i], static_cast<float>(want)) << count << " f32, element " << i;
          }
        }
      }
    });
    EXPECT_TRUE(result.ok()) << result.summary();
  }
}

std::vector<std::optional<Error>> errors_of(int n, milliseconds timeout,
                                            const std::function<void(int, Backend&)>& fn) {
  return shm_test::errors_of(n, timeout, unique_job(), fn);
}

CollectiveDesc reduce(std::vector<float>& buf, int64_t count, int root) {
  CollectiveDesc d;
  d.kind = CollectiveKind::kReduce;
  d.send = d.recv = buf.data();
  d.count = count;
  d.root = root;
  return d;
}

void barrier(Backend& b) {
  CollectiveDesc d;
  d.kind = CollectiveKind::kBarrier;
  run(b, d);
}

// The root compares each contribution's call with its own before it folds anything.
TEST(ShmSmallReduceErrors, ARootWhoseCallDiffersFromAContributorsNamesBoth) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    run(b, reduce(buf, me == 2 ? 8 : 4, 0));
    barrier(b);
  });
  ASSERT_TRUE(errors[0].has_value());
  EXPECT_EQ(errors[0]->kind(), ErrorKind::kInvalidArgument) << errors[0]->what();
  const std::string msg = errors[0]->message();
  EXPECT_NE(msg.find("group rank 0 (world rank 10) called reduce f32 x 4 sum root 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("group rank 2 (world rank 12) called reduce f32 x 8 sum root 0"),
            std::string::npos)
      << msg;
  for (int r : {1, 2}) {  // at the barrier: the root left the group
    ASSERT_TRUE(errors[r].has_value()) << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kPeerLost) << errors[r]->what();
  }
}

// A small broadcast's root writes the same cell a reduce's contributor would: the reduce's root
// reads a broadcast there and names it, or, where it looks while it waits, finds the broadcast
// of rank 1 or 2 in their published calls first (either names the broadcast).
TEST(ShmSmallReduceErrors, ARootThatFindsABroadcastInACellNamesIt) {
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    CollectiveDesc d = reduce(buf, 16, 0);
    if (me != 0) d.kind = CollectiveKind::kBroadcast, d.root = 1;
    run(b, d);
    barrier(b);
  });
  ASSERT_TRUE(errors[0].has_value());
  EXPECT_EQ(errors[0]->kind(), ErrorKind::kInvalidArgument) << errors[0]->what();
  const std::string msg = errors[0]->message();
  EXPECT_NE(msg.find("called reduce f32 x 16 sum root 0"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("group rank 1 (world rank 11) called broadcast f32 x 16 root 1") !=
                  std::string::npos ||
              msg.find("group rank 2 (world rank 12) called broadcast f32 x 16 root 1") !=
                  std::string::npos)
      << msg;
}

// The root of a small reduce waits for contributors that make a step-protocol call instead,
// and they wait for it: every rank names both calls, long before the deadline.
TEST(ShmSmallReduceErrors, AReduceAgainstAStepCallIsAMismatchOnEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = errors_of(3, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(16, 1.f);
    CollectiveDesc d = reduce(buf, 16, 0);
    if (me != 0) d.kind = CollectiveKind::kAllReduce;
    run(b, d);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    const std::string msg = errors[r]->message();
    EXPECT_NE(msg.find("all_reduce f32 x 16 sum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reduce f32 x 16 sum root 0"), std::string::npos) << msg;
  }
}

// Ranks that each believe another is the root all contribute and nobody waits; the digest
// compared at the next step call reports it on both.
TEST(ShmSmallReduceErrors, RanksThatDisagreeOnTheRootFailAtTheNextCall) {
  auto errors = errors_of(2, milliseconds(20000), [](int me, Backend& b) {
    std::vector<float> buf(4, 1.f);
    for (int k = 0; k < 3; ++k) run(b, reduce(buf, 4, k == 1 ? 1 - me : 0));
    barrier(b);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r].has_value()) << "rank " << r;
    EXPECT_EQ(errors[r]->kind(), ErrorKind::kInvalidArgument) << errors[r]->what();
    EXPECT_NE(errors[r]->message().find("small broadcasts and reduces"), std::string::npos)
        << errors[r]->message();
  }
}

// A contributor that never comes: the root's wait ends at the deadline and names it.
TEST(ShmSmallReduceErrors, ARootTimesOutNamingTheMissingContributor) {
  auto errors = errors_of(3, milliseconds(1500), [](int me, Backend& b) {
    std::vector<float> buf(4, 1.f);
    if (me != 2) run(b, reduce(buf, 4, 0));
  });
  ASSERT_TRUE(errors[0].has_value());
  EXPECT_EQ(errors[0]->kind(), ErrorKind::kTimeout) << errors[0]->what();
  const std::string msg = errors[0]->message();
  EXPECT_NE(msg.find("reduce (seq 0, group call #1) on group rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("waiting for group ranks [2] (world ranks [12])"), std::string::npos) << msg;
  EXPECT_FALSE(errors[1].has_value()) << errors[1]->what();  // it contributed and returned
}

// A contributor whose ring is full waits for every other rank's `done`; when that wait fails it
// names every rank behind: here the root that never comes and a contributor that stopped (both
// before their first call; the full ring waits for the first call's readers), where
// the first alone could be a rank that itself waits (the kill soak: a reduce's root waiting for
// a stopped contributor, which gave up first).
TEST(ShmSmallReduceErrors, AContributorWithAFullRingNamesEveryRankBehind) {
  auto errors = errors_of(3, milliseconds(1500), [](int me, Backend& b) {
    std::vector<float> buf(4, 1.f);
    const int calls = me == 1 ? shm::kBcastCells + 20 : 0;  // rank 2 stops before its first
    for (int k = 0; k < calls; ++k) run(b, reduce(buf, 4, 0));
  });
  ASSERT_TRUE(errors[1].has_value());
  EXPECT_EQ(errors[1]->kind(), ErrorKind::kTimeout) << errors[1]->what();
  const std::string msg = errors[1]->message();
  EXPECT_NE(msg.find("waiting for group ranks [0, 2] (world ranks [10, 12])"), std::string::npos)
      << msg;
  EXPECT_FALSE(errors[2].has_value()) << errors[2]->what();
}

}  // namespace
}  // namespace braid
