// The shm backend's zero-copy path (docs/shm.md, "Zero-copy buffers"): collectives on
// buffers from Backend::allocate give the same bits as on ordinary memory for every kind that
// has a zero-copy form, sizes 0 / 1 / 4099 / 1 MiB + 3 elements, 1 to 4 ranks, in and out of
// place, ranks as threads and as forked processes; mixed placement falls back to the slots;
// the arena's allocate / release reuse, alignment and the full-arena error; empty_shared on
// ProcessGroup and its fallback; no /dev/shm leftovers.
#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <tuple>

#include "../src/shm_backend.h"
#include "../src/shm_group.h"
#include "../src/wait_policy.h"
#include "braid/comm/shared_tensor.h"
#include "braid/core/allocator.h"
#include "braid/core/environment.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using Bytes = std::vector<uint8_t>;
using std::chrono::milliseconds;

std::string unique_job(const char* what) {
  static std::atomic<int> counter{0};
  return std::string("zc") + what + std::to_string(getpid()) + "n" + std::to_string(counter++);
}

std::vector<std::string> leftovers(const std::string& job) {
  std::vector<std::string> out;
  const std::string prefix = "braid-" + job + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    }
    closedir(dir);
  }
  return out;
}

ShmOptions test_options() {
  ShmOptions o;
  o.slot_bytes = 64 << 10;  // many slot steps for the big case: a different chunking
  o.arena_bytes = 64 << 20;
  o.zerocopy_bytes = 0;     // every non-empty call tries the zero-copy path
  o.kernel_copy_bytes = 0;  // ordinary buffers stage (the kernel-copy tests turn it on)
  // Broadcasts and reduces above one data slot would take the small-call paths, which up to
  // one slot yield to the zero-copy paths (docs/shm.md, "Small broadcasts", "Small reduces").
  o.bcast_bytes = o.bcast_shared_bytes = shm::kBcastCellBytes;
  o.reduce_bytes = shm::kBcastCellBytes;
  return o;
}

std::unique_ptr<Backend> make_backend(int rank, int size, std::shared_ptr<Store> store,
                                      const std::string& job, const ShmOptions& options) {
  BackendContext ctx;
  ctx.store = std::move(store);
  ctx.rank = rank;
  ctx.size = size;
  ctx.job_id = job;
  ctx.timeout = milliseconds(60000);
  return create_shm_backend(ctx, options);
}

uint64_t zero_copy_calls(Backend& b) {
  return dynamic_cast<shm::ShmGroup&>(b).zero_copy_calls();
}

uint64_t kernel_copy_calls(Backend& b) {
  return dynamic_cast<shm::ShmGroup&>(b).kernel_copy_calls();
}

struct Case {
  CollectiveKind kind;
  DType dtype;
  ReduceOp op;
  int64_t count;
  bool in_place;
};

// An all_to_all in place rewrites the blocks its peers would read: it always stages.
bool stages_always(const Case& cs) {
  return cs.kind == CollectiveKind::kAllToAll && cs.in_place;
}

enum class Placement { kOrdinary, kShared, kMixed };  // kMixed: the root rank (n-1) ordinary

constexpr int64_t kBig = (int64_t{1} << 20) / 4 + 3;  // 1 MiB of f32 + 3 elements
// An all_reduce large enough for the kernel copy (which it takes from 2 MiB).
constexpr int64_t kBigAllReduce = (int64_t{2} << 20) / 4 + 5;

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const CollectiveKind kinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduce,
                                  CollectiveKind::kBroadcast, CollectiveKind::kAllGather,
                                  CollectiveKind::kGather,    CollectiveKind::kReduceScatter,
                                  CollectiveKind::kAllToAll,  CollectiveKind::kScatter};
  for (CollectiveKind kind : kinds) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{4099}, kBig}) {
      for (bool in_place : {false, true}) {
        cases.push_back({kind, DType::kF32, ReduceOp::kSum, count, in_place});
        if (count != 4099) continue;  // other dtypes / ops at one size
        cases.push_back({kind, DType::kBF16, ReduceOp::kAvg, count, in_place});
        cases.push_back({kind, DType::kI32, ReduceOp::kProd, count, in_place});
        cases.push_back({kind, DType::kF64, ReduceOp::kPremulSum, count, in_place});
      }
    }
  }
  for (bool in_place : {false, true}) {
    cases.push_back(
        {CollectiveKind::kAllReduce, DType::kF32, ReduceOp::kSum, kBigAllReduce, in_place});
  }
  return cases;
}

// Values in [-1, 1) (order-sensitive sums) converted to `dtype`.
void fill(uint8_t* out, DType dtype, int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(gen);
    if (dtype == DType::kF32) {
      std::memcpy(out + i * 4, &v, 4);
    } else if (dtype == DType::kF64) {
      const double d = v;
      std::memcpy(out + i * 8, &d, 8);
    } else if (dtype == DType::kBF16) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out + i * 2, &h, 2);
    } else {
      const int32_t x = static_cast<int32_t>(v * 7) | 1;  // odd: products stay non-zero
      std::memcpy(out + i * 4, &x, 4);
    }
  }
}

// One buffer, either from the backend's arena or from the heap.
struct Buffer {
  Backend* backend = nullptr;
  uint8_t* data = nullptr;
  std::vector<uint8_t> heap;
  Buffer(Backend& b, size_t bytes, bool shared) {
    if (shared) {
      backend = &b;
      data = static_cast<uint8_t*>(b.allocate(bytes));
      EXPECT_NE(data, nullptr);
    } else {
      heap.resize(std::max<size_t>(bytes, 1));
      data = heap.data();
    }
  }
  ~Buffer() {
    if (backend) backend->release(data);
  }
};

// Runs `cs` on this rank; returns the bytes this rank ends with (its in-place buffer, or its
// recv buffer) and whether the call took the zero-copy path.
Bytes run_case(int me, int n, Backend& b, const Case& cs, Placement placement, uint64_t seq,
               bool* zero_copy, bool* kernel_copy = nullptr) {
  const bool shared =
      placement == Placement::kShared || (placement == Placement::kMixed && me != n - 1);
  const int64_t es = static_cast<int64_t>(dtype_size(cs.dtype));
  const bool recv_blocks = cs.kind == CollectiveKind::kAllGather ||
                           cs.kind == CollectiveKind::kGather ||
                           cs.kind == CollectiveKind::kAllToAll;
  const bool send_blocks = cs.kind == CollectiveKind::kReduceScatter ||
                           cs.kind == CollectiveKind::kAllToAll ||
                           cs.kind == CollectiveKind::kScatter;
  const int64_t send_elems = send_blocks ? n * cs.count : cs.count;
  const int64_t recv_elems = recv_blocks ? n * cs.count : cs.count;
  const uint32_t seed = static_cast<uint32_t>(seq * 131 + me);
  Buffer a(b,
           static_cast<size_t>((cs.in_place ? std::max(send_elems, recv_elems) : send_elems) * es),
           shared);
  std::optional<Buffer> r;
  CollectiveDesc d;
  d.kind = cs.kind;
  d.dtype = cs.dtype;
  d.op = cs.op;
  d.premul_factor = 0.5 + me;
  d.count = cs.count;
  d.root = n - 1;
  d.seq = seq;
  if (cs.in_place) {
    fill(a.data, cs.dtype, std::max(send_elems, recv_elems), seed);
    d.recv = a.data;
    d.send = a.data;
    // In place: all_gather sends its block of the result, reduce_scatter and the scatter root
    // receive their block of the send buffer, all_to_all sends and receives in one buffer.
    const bool gathers =
        cs.kind == CollectiveKind::kAllGather || cs.kind == CollectiveKind::kGather;
    if (gathers) d.send = a.data + me * cs.count * es;
    if (cs.kind == CollectiveKind::kReduceScatter || cs.kind == CollectiveKind::kScatter) {
      d.recv = a.data + me * cs.count * es;
    }
  } else {
    fill(a.data, cs.dtype, send_elems, seed);
    r.emplace(b, static_cast<size_t>(recv_elems * es), shared);
    std::memset(r->data, 0xab, static_cast<size_t>(recv_elems * es));
    d.send = a.data;
    d.recv = r->data;
  }
  const uint64_t before = zero_copy_calls(b), kc_before = kernel_copy_calls(b);
  auto work = b.run(d);
  if (work->error()) std::rethrow_exception(work->error());
  *zero_copy = zero_copy_calls(b) == before + 1;
  if (kernel_copy) *kernel_copy = kernel_copy_calls(b) == kc_before + 1;
  const uint8_t* result = cs.in_place ? a.data : r->data;
  const int64_t result_elems = cs.in_place ? std::max(send_elems, recv_elems) : recv_elems;
  return Bytes(result, result + result_elems * es);
}

std::string case_name(const Case& cs, int n) {
  return std::string(collective_name(cs.kind)) + " " + std::string(dtype_name(cs.dtype)) + " x " +
         std::to_string(cs.count) + (cs.in_place ? " in place" : " out of place") + " on " +
         std::to_string(n) + " ranks";
}

// Every case on ordinary, shared and mixed buffers; the bits must agree, and only the shared
// run of a non-empty call may take the zero-copy path.
void check_grid(int me, int n, Backend& b) {
  uint64_t seq = 0;
  bool failed = false;
  for (const Case& cs : all_cases()) {
    ++seq;
    bool zc_ordinary = false, zc_shared = false, zc_mixed = false;
    const Bytes ordinary = run_case(me, n, b, cs, Placement::kOrdinary, seq, &zc_ordinary);
    const Bytes shared = run_case(me, n, b, cs, Placement::kShared, seq, &zc_shared);
    const Bytes mixed = run_case(me, n, b, cs, Placement::kMixed, seq, &zc_mixed);
    // Every rank runs every case (the ranks must stay in step), reporting its first failure.
    if (failed) continue;
    const std::string what = case_name(cs, n) + ", rank " + std::to_string(me);
    EXPECT_TRUE(ordinary == shared) << what << ": shared buffers changed the bits";
    EXPECT_TRUE(ordinary == mixed) << what << ": mixed buffers changed the bits";
    const bool expect_shared = cs.count > 0 && !stages_always(cs);
    EXPECT_FALSE(zc_ordinary) << what;
    EXPECT_EQ(zc_shared, expect_shared) << what;
    EXPECT_FALSE(zc_mixed) << what;  // the root's buffers are ordinary
    failed = ordinary != shared || ordinary != mixed || zc_ordinary || zc_shared != expect_shared ||
             zc_mixed;
  }
}

// Runs `body` on n ranks, as threads or as forked processes, under a fresh job name; every rank
// must pass and the job must leave nothing in /dev/shm.
void expect_on_ranks(
    bool processes, int n, const char* what,
    const std::function<void(int, int, std::shared_ptr<Store>, const std::string&)>& body) {
  const std::string job = unique_job(what);
  const testing::RankFn fn = [&](int me, int size, std::shared_ptr<Store> store) {
    body(me, size, std::move(store), job);
  };
  auto result = processes ? testing::run_processes(n, fn) : testing::run_threads(n, fn);
  EXPECT_TRUE(result.ok()) << result.summary();
  EXPECT_TRUE(leftovers(job).empty());
}

// (processes, ranks)
class ShmZeroCopyRanks : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ShmZeroCopyRanks, SameBitsAsSlotPathForEveryKindAndSize) {
  const auto [processes, n] = GetParam();
  expect_on_ranks(processes, n, "z",
                  [](int me, int size, std::shared_ptr<Store> store, const std::string& job) {
                    auto b = make_backend(me, size, store, job, test_options());
                    ASSERT_TRUE(b->capabilities().can_allocate_shared);
                    check_grid(me, size, *b);
                  });
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, ShmZeroCopyRanks,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4)));

// ---- kernel copy (process_vm_readv / writev; docs/shm.md, "Kernel copy") ----

ShmOptions kernel_copy_options() {
  ShmOptions o = test_options();
  o.kernel_copy_bytes = 1;  // every non-empty call (all_reduce: from 2 MiB)
  return o;
}

// Runs `d` on `b`: "" when it succeeds, else "the <kind> failed: <what>".
std::string run_failure(Backend& b, const CollectiveDesc& d) {
  if (const std::exception_ptr error = b.run(d)->error()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return "the " + std::string(collective_name(d.kind)) + " failed: " + e.what();
    }
  }
  return "";
}

// An all_gather of `count` int32 per rank on ordinary (heap) buffers, rank r sending
// i * mul + r at i. Returns "" when every block arrived exactly (every `stride`-th element
// checked), else what went wrong.
std::string all_gather_pattern(Backend& b, int me, int size, int64_t count, int32_t mul,
                               int64_t stride = 1) {
  std::vector<int32_t> in(count), out(size * count, -1);
  for (int64_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i * mul + me);
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllGather;
  d.dtype = DType::kI32;
  d.count = count;
  d.send = in.data();
  d.recv = out.data();
  if (std::string failure = run_failure(b, d); !failure.empty()) return failure;
  for (int p = 0; p < size; ++p) {
    for (int64_t i = 0; i < count; i += stride) {
      if (out[p * count + i] != static_cast<int32_t>(i * mul + p)) {
        return "block " + std::to_string(p) + " element " + std::to_string(i) + " is " +
               std::to_string(out[p * count + i]);
      }
    }
  }
  return "";
}

// An all_to_all of `count` int32 a block on ordinary (heap) buffers, rank r sending
// (i * mul + r) * 64 + p at i of its block for rank p; in place when `in_place`. Returns "" when
// every block arrived exactly (every `stride`-th element checked), else what went wrong.
std::string all_to_all_pattern(Backend& b, int me, int size, int64_t count, int32_t mul,
                               bool in_place, int64_t stride = 1) {
  std::vector<int32_t> in(size * count), out(size * count, -1);
  for (int p = 0; p < size; ++p) {
    for (int64_t i = 0; i < count; ++i) {
      in[p * count + i] = static_cast<int32_t>((i * mul + me) * 64 + p);
    }
  }
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllToAll;
  d.dtype = DType::kI32;
  d.count = count;
  d.send = in.data();
  d.recv = in_place ? in.data() : out.data();
  if (std::string failure = run_failure(b, d); !failure.empty()) return failure;
  const std::vector<int32_t>& got = in_place ? in : out;
  for (int p = 0; p < size; ++p) {
    for (int64_t i = 0; i < count; i += stride) {
      const auto want = static_cast<int32_t>((i * mul + p) * 64 + me);
      if (got[p * count + i] != want) {
        return "block " + std::to_string(p) + " element " + std::to_string(i) + " is " +
               std::to_string(got[p * count + i]) + ", expected " + std::to_string(want);
      }
    }
  }
  return "";
}

// Whether the call tries the kernel copy with kernel_copy_options(): every non-empty call, but
// all_reduce only from 2 MiB.
bool tries_kernel_copy(const Case& cs) {
  const int64_t bytes = cs.count * static_cast<int64_t>(dtype_size(cs.dtype));
  return cs.count > 0 && (cs.kind != CollectiveKind::kAllReduce || bytes >= (int64_t{2} << 20));
}

// Whether the call reads in place with kernel_copy_options(): when it tries the kernel copy, and
// otherwise (small all_reduce) only when every buffer lies in an arena.
bool expect_zero_copy(const Case& cs, Placement placement) {
  if (cs.count == 0 || stages_always(cs)) return false;
  return tries_kernel_copy(cs) || placement == Placement::kShared;
}

// Whether rank `me` must have copied through the kernel: it reads a peer's buffer that lies
// outside that peer's arena, or (in-place broadcast root) writes its share into the peers.
bool expect_kernel_copy(const Case& cs, Placement placement, int me, int n) {
  if (n == 1 || !tries_kernel_copy(cs) || stages_always(cs)) return false;
  const int root = n - 1;
  auto outside = [&](int p) {
    return placement == Placement::kOrdinary || (placement == Placement::kMixed && p == n - 1);
  };
  bool any_peer_outside = false;
  for (int p = 0; p < n; ++p) any_peer_outside |= p != me && outside(p);
  switch (cs.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return any_peer_outside;
    case CollectiveKind::kScatter:
      return me != root && outside(root);
    case CollectiveKind::kReduce:
    case CollectiveKind::kGather:
      return me == root && any_peer_outside;
    case CollectiveKind::kBroadcast:
      return me == root ? cs.in_place && cs.count >= n : outside(root);
    default:
      return false;
  }
}

// Every case with the kernel copy on: ordinary, shared and mixed buffers all read in place
// (small all_reduce: shared ones only), with the bits of the slot path (a second backend with the
// kernel copy off, on ordinary buffers), and exactly the ranks that read (or write) a buffer
// outside the arenas count a kernel copy.
void check_kernel_copy_grid(int me, int n, Backend& kc, Backend& slots) {
  uint64_t seq = 0;
  bool failed = false;
  for (const Case& cs : all_cases()) {
    ++seq;
    bool zc = false, kcopy = false, staged_zc = false;
    const Bytes reference = run_case(me, n, slots, cs, Placement::kOrdinary, seq, &staged_zc);
    for (Placement pl : {Placement::kOrdinary, Placement::kShared, Placement::kMixed}) {
      const Bytes got = run_case(me, n, kc, cs, pl, seq, &zc, &kcopy);
      if (failed) continue;
      const std::string what = case_name(cs, n) + ", rank " + std::to_string(me) + ", placement " +
                               std::to_string(static_cast<int>(pl));
      EXPECT_FALSE(staged_zc) << what;
      EXPECT_TRUE(got == reference) << what << ": the kernel copy changed the bits";
      EXPECT_EQ(zc, expect_zero_copy(cs, pl)) << what;
      EXPECT_EQ(kcopy, expect_kernel_copy(cs, pl, me, n)) << what;
      failed = got != reference || zc != expect_zero_copy(cs, pl) ||
               kcopy != expect_kernel_copy(cs, pl, me, n) || staged_zc;
    }
  }
}

class ShmKernelCopyRanks : public ::testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(ShmKernelCopyRanks, SameBitsAsSlotPathForEveryKindSizeAndPlacement) {
  const auto [processes, n] = GetParam();
  expect_on_ranks(processes, n, "k",
                  [](int me, int size, std::shared_ptr<Store> store, const std::string& job) {
                    auto kc = make_backend(me, size, store, job, kernel_copy_options());
                    auto slots = make_backend(me, size, store, job, test_options());
                    check_kernel_copy_grid(me, size, *kc, *slots);
                  });
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndProcesses, ShmKernelCopyRanks,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4)));

// A rank whose own kernel_copy_bytes is 0 does not offer its buffers: the first call falls back
// to the slots on every rank (right bits), and the group stops trying from then on.
TEST(ShmKernelCopy, OneRankOptingOutTurnsItOffForTheGroup) {
  const std::string job = unique_job("ko");
  const int64_t count = 300007;  // 2.4 MB: all_reduce tries the kernel copy from 2 MiB
  auto result = testing::run_processes(3, [&](int me, int size, std::shared_ptr<Store> store) {
    ShmOptions o = kernel_copy_options();
    if (me == 1) o.kernel_copy_bytes = 0;
    auto b = make_backend(me, size, store, job, o);
    std::vector<int64_t> x(count);
    for (int call = 0; call < 3; ++call) {
      for (int64_t i = 0; i < count; ++i) x[i] = i * (me + 1) + call;
      CollectiveDesc d;
      d.kind = CollectiveKind::kAllReduce;
      d.dtype = DType::kI64;
      d.count = count;
      d.send = d.recv = x.data();
      d.seq = static_cast<uint64_t>(call + 1);
      ASSERT_EQ(b->run(d)->error(), nullptr);
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(x[i], i * 6 + 3 * call) << "call " << call << ", element " << i;
      }
    }
    EXPECT_EQ(zero_copy_calls(*b), 0u);
    EXPECT_EQ(kernel_copy_calls(*b), 0u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// The default options read ordinary buffers of a large all_gather in place (where the kernel
// allows process_vm_readv, as on the machines the suite runs on), and the result is exact.
TEST(ShmKernelCopy, DefaultOptionsUseItForLargeOrdinaryBuffers) {
  const std::string job = unique_job("kd");
  const int64_t count = (int64_t{2} << 20) / 4;  // 2 MiB of i32 per rank
  auto result = testing::run_processes(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    EXPECT_EQ(all_gather_pattern(*b, me, size, count, 3), "");
    EXPECT_EQ(kernel_copy_calls(*b), 1u);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// An all_reduce of kKernelCopyPagedBytes (i32, out of place) on `in` / `out`, rank r adding
// i * (r + 1) + call at i; "" when exact, else what went wrong.
std::string paged_all_reduce(Backend& b, int me, int size, int32_t* in, int32_t* out, int call) {
  const int64_t count = static_cast<int64_t>(shm::kKernelCopyPagedBytes / 4);
  for (int64_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i * (me + 1) + call);
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllReduce;
  d.dtype = DType::kI32;
  d.count = count;
  d.send = in;
  d.recv = out;
  if (b.run(d)->error()) return "the all_reduce failed";
  const int64_t ranks_sum = static_cast<int64_t>(size) * (size + 1) / 2;
  for (int64_t i = 0; i < count; ++i) {
    if (out[i] != static_cast<int32_t>(i * ranks_sum + size * call)) {
      return "call " + std::to_string(call) + " element " + std::to_string(i) + " is " +
             std::to_string(out[i]);
    }
  }
  return "";
}

// Note [Kernel copy]: from kKernelCopyPagedBytes an all_reduce whose buffers are not on huge
// pages stages; a rank that declines leaves the group trying at later calls (a 2 MiB all_gather
// after it reads through the kernel); where one rank offers and the other declines, the slot
// path starts again; buffers of braid's cpu allocator on huge pages take the kernel copy.
// Results exact throughout.
TEST(ShmKernelCopy, LargeReductionsOnSmallPagesStage) {
  const std::string job = unique_job("kp");
  const size_t bytes = shm::kKernelCopyPagedBytes;
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    std::vector<int32_t> in(bytes / 4), out(bytes / 4);
    DataPtr huge_in = get_allocator(kCPU).allocate(bytes);
    DataPtr huge_out = get_allocator(kCPU).allocate(bytes);
    auto* hin = static_cast<int32_t*>(huge_in.get());
    auto* hout = static_cast<int32_t*>(huge_out.get());
    const bool heap_huge =
        cpu_memory_on_huge_pages(in.data(), bytes) && cpu_memory_on_huge_pages(out.data(), bytes);
    const bool block_huge =
        cpu_memory_on_huge_pages(hin, bytes) && cpu_memory_on_huge_pages(hout, bytes);
    uint64_t before = kernel_copy_calls(*b);
    EXPECT_EQ(paged_all_reduce(*b, me, size, in.data(), out.data(), 1), "");
    EXPECT_EQ(kernel_copy_calls(*b) - before, heap_huge ? 1u : 0u) << "heap buffers";
    before = kernel_copy_calls(*b);
    EXPECT_EQ(all_gather_pattern(*b, me, size, (int64_t{2} << 20) / 4, 3), "");
    EXPECT_EQ(kernel_copy_calls(*b) - before, 1u) << "an all_gather after a declined call";
    before = kernel_copy_calls(*b);
    EXPECT_EQ(
        paged_all_reduce(*b, me, size, me == 0 ? hin : in.data(), me == 0 ? hout : out.data(), 2),
        "");
    EXPECT_EQ(kernel_copy_calls(*b) - before, heap_huge && block_huge ? 1u : 0u) << "mixed";
    before = kernel_copy_calls(*b);
    EXPECT_EQ(paged_all_reduce(*b, me, size, hin, hout, 3), "");
    EXPECT_EQ(kernel_copy_calls(*b) - before, block_huge ? 1u : 0u) << "huge-page blocks";
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// With more ranks than CPUs a result above kKernelCopyLimitShared stays on the slots; just below
// it the kernel copy runs. Both exact.
TEST(ShmKernelCopy, RanksSharingCpusStageResultsAboveTheLimit) {
  const int n = usable_cpus() + 1;
  if (n > 8) GTEST_SKIP() << "needs at most 7 usable CPUs (has " << usable_cpus() << ")";
  const std::string job = unique_job("kl");
  const uint64_t limit = shm::kKernelCopyLimitShared;
  auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    for (const uint64_t result_bytes :
         {limit - 4096 * uint64_t(size), limit + 4096 * uint64_t(size)}) {
      const int64_t count = static_cast<int64_t>(result_bytes / 4 / size);
      const uint64_t before = kernel_copy_calls(*b);
      EXPECT_EQ(all_gather_pattern(*b, me, size, count, 7, 997), "") << result_bytes;
      EXPECT_EQ(kernel_copy_calls(*b) - before, result_bytes <= limit ? 1u : 0u) << result_bytes;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// With more than twice as many ranks as CPUs a result above kKernelCopyLimitCrowded stays on
// the slots, and so does a message below kKernelCopyBytesCrowded a rank; between the two the
// kernel copy runs. All exact.
TEST(ShmKernelCopy, RanksCrowdingTheCpusStageFromTheLowerLimit) {
  const int n = 2 * usable_cpus() + 1;
  if (n > 8) GTEST_SKIP() << "needs at most 3 usable CPUs (has " << usable_cpus() << ")";
  const std::string job = unique_job("kc");
  const uint64_t limit = shm::kKernelCopyLimitCrowded, floor = shm::kKernelCopyBytesCrowded;
  auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    const std::pair<uint64_t, bool> cases[] = {
        {floor - 4096, false},  // bytes a rank: below the floor
        {floor, true},
        {limit / uint64_t(size) - 1024, true},  // the result just below the limit
        {limit / uint64_t(size) + 1024, false},
    };
    for (const auto& [block, kernel] : cases) {
      const int64_t count = static_cast<int64_t>(block / 4);
      const uint64_t before = kernel_copy_calls(*b);
      EXPECT_EQ(all_gather_pattern(*b, me, size, count, 5, 991), "") << block;
      EXPECT_EQ(kernel_copy_calls(*b) - before, kernel ? 1u : 0u) << block << " bytes a rank";
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// all_to_all reads each block once (all_gather: n-1 times), so crowded groups read it through
// the kernel above kKernelCopyLimitCrowded too; below kKernelCopyBytesCrowded a block it stages.
// All exact.
TEST(ShmKernelCopy, CrowdedAllToAllReadsLargeResultsThroughTheKernel) {
  const int n = 2 * usable_cpus() + 1;
  if (n > 8) GTEST_SKIP() << "needs at most 3 usable CPUs (has " << usable_cpus() << ")";
  const std::string job = unique_job("ka");
  const uint64_t limit = shm::kKernelCopyLimitCrowded, floor = shm::kKernelCopyBytesCrowded;
  auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    const std::pair<uint64_t, bool> cases[] = {
        {floor - 4096, false},  // bytes a block: below the floor
        {floor, true},
        {limit / uint64_t(size) + 1024, true},  // the result above the limit
    };
    for (const auto& [block, kernel] : cases) {
      const int64_t count = static_cast<int64_t>(block / 4);
      const uint64_t before = kernel_copy_calls(*b);
      EXPECT_EQ(all_to_all_pattern(*b, me, size, count, 5, false, 991), "") << block;
      EXPECT_EQ(kernel_copy_calls(*b) - before, kernel ? 1u : 0u) << block << " bytes a block";
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// An all_to_all in place on some ranks stages on every rank (their blocks would be rewritten
// while peers read them); the next call out of place everywhere reads through the kernel again.
// Processes, so that process_vm_readv crosses address spaces.
TEST(ShmKernelCopy, AllToAllInPlaceOnOneRankStagesForThatCall) {
  const std::string job = unique_job("ki");
  auto result = testing::run_processes(3, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, kernel_copy_options());
    const int64_t count = (int64_t{64} << 10) / 4 + 3;
    for (int call = 0; call < 4; ++call) {
      // Call 0: all out of place; 1: rank 1 in place; 2: all in place; 3: out of place again.
      const bool in_place = call == 2 || (call == 1 && me == 1);
      const uint64_t before = kernel_copy_calls(*b), zc_before = zero_copy_calls(*b);
      EXPECT_EQ(all_to_all_pattern(*b, me, size, count, 3 + call, in_place), "") << "call " << call;
      const bool kernel = call == 0 || call == 3;
      EXPECT_EQ(kernel_copy_calls(*b) - before, kernel ? 1u : 0u) << "call " << call;
      EXPECT_EQ(zero_copy_calls(*b) - zc_before, kernel ? 1u : 0u) << "call " << call;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// With a CPU per rank, all_gather reads its peers' ordinary buffers from its own threshold
// (kernel_copy_gather_bytes, 8 KiB a rank by default), the other kinds from kernel_copy_bytes
// (32 KiB); with more ranks than CPUs all_gather keeps the common one. Results exact.
TEST(ShmKernelCopy, AllGatherHasItsOwnThresholdWithACpuPerRank) {
  if (usable_cpus() < 2) GTEST_SKIP() << "needs 2 usable CPUs (has " << usable_cpus() << ")";
  const std::string job = unique_job("kg");
  auto result = testing::run_processes(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, ShmOptions{});
    const int64_t at = int64_t{8 << 10} / 4;  // 8 KiB of i32 a rank
    EXPECT_EQ(all_gather_pattern(*b, me, size, at - 1, 3), "");
    EXPECT_EQ(kernel_copy_calls(*b), 0u) << "an all_gather below the threshold";
    EXPECT_EQ(all_gather_pattern(*b, me, size, at, 5), "");
    EXPECT_EQ(kernel_copy_calls(*b), 1u) << "an all_gather at the threshold";
    // A reduce_scatter of 8 KiB a rank stays on the slots.
    std::vector<float> in(2 * at, 1.0f + me), out(at, -1.0f);
    CollectiveDesc d;
    d.kind = CollectiveKind::kReduceScatter;
    d.dtype = DType::kF32;
    d.op = ReduceOp::kSum;
    d.count = at;
    d.send = in.data();
    d.recv = out.data();
    EXPECT_EQ(b->run(d)->error(), nullptr);
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(out[at - 1], 3.0f);
    EXPECT_EQ(kernel_copy_calls(*b), 1u) << "a reduce_scatter below kernel_copy_bytes";
  });
  EXPECT_TRUE(result.ok()) << result.summary();
  const int n = usable_cpus() + 1;
  if (n > 8) GTEST_SKIP() << "checked a CPU per rank only (" << usable_cpus() << " CPUs)";
  const std::string shared_job = unique_job("ks");
  result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, shared_job, ShmOptions{});
    EXPECT_EQ(all_gather_pattern(*b, me, size, int64_t{16 << 10} / 4, 7), "");
    EXPECT_EQ(kernel_copy_calls(*b), 0u) << "16 KiB a rank, ranks sharing CPUs";
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Whether this process may make a pid namespace (root, or a user namespace that allows it).
bool can_unshare_pid_namespace() {
  const pid_t probe = ::fork();
  if (probe == 0) _exit(::unshare(CLONE_NEWPID) == 0 ? 0 : 1);
  int status = 0;
  ::waitpid(probe, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A rank in a pid namespace of its own (a container sharing /dev/shm but not pids) publishes a
// pid that names another process for its peer: the group must stage, never read that pid, and
// never take that pid's absence for the peer's exit (rank 0 starts late, so that rank 1 waits
// through several futex slices and looks at rank 0's liveness between them).
TEST(ShmKernelCopy, RanksInDifferentPidNamespacesStage) {
  if (!can_unshare_pid_namespace()) GTEST_SKIP() << "cannot create a pid namespace here";
  const std::string job = unique_job("kn");
  const int64_t count = (int64_t{1} << 20) / 4;
  // "" when the result is exact and no kernel copy ran, else what went wrong.
  auto run = [&](int me, int size, std::shared_ptr<Store> store) -> std::string {
    auto b = make_backend(me, size, std::move(store), job, kernel_copy_options());
    if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::string wrong = all_gather_pattern(*b, me, size, count, 5);
    if (wrong.empty() && kernel_copy_calls(*b) != 0) {
      wrong = std::to_string(kernel_copy_calls(*b)) + " kernel copies";
    }
    return wrong;
  };
  auto result = testing::run_processes(2, [&](int me, int size, std::shared_ptr<Store> store) {
    if (me == 0) {
      EXPECT_EQ(run(me, size, store), "") << "rank 0";
      return;
    }
    ASSERT_EQ(::unshare(CLONE_NEWPID), 0);
    const pid_t child = ::fork();  // the first child is pid 1 of the new namespace
    if (child == 0) {
      const std::string wrong = run(me, size, store);
      if (!wrong.empty())
        std::fprintf(stderr, "rank 1 (pid 1 of its namespace): %s\n", wrong.c_str());
      _exit(wrong.empty() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank 1 (pid 1 of its namespace): wrong result or a kernel copy";
  });
  EXPECT_TRUE(result.ok()) << result.summary();
  EXPECT_TRUE(leftovers(job).empty());
}

// An independent check of the zero-copy all_reduce: integer sums are exact.
TEST(ShmZeroCopy, AllReduceIntegerSumMatchesClosedForm) {
  const int n = 3;
  const int64_t count = 10007;
  const std::string job = unique_job("i");
  auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, test_options());
    auto* x = static_cast<int64_t*>(b->allocate(count * 8));
    for (int64_t i = 0; i < count; ++i) x[i] = i * (me + 1);
    CollectiveDesc d;
    d.kind = CollectiveKind::kAllReduce;
    d.dtype = DType::kI64;
    d.count = count;
    d.send = d.recv = x;
    auto work = b->run(d);
    ASSERT_EQ(work->error(), nullptr);
    EXPECT_EQ(zero_copy_calls(*b), 1u);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(x[i], i * 6) << "element " << i;  // 1 + 2 + 3
    }
    b->release(x);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Below zerocopy_bytes the slot path runs even on shared buffers.
TEST(ShmZeroCopy, ThresholdKeepsSmallCallsOnTheSlots) {
  const std::string job = unique_job("s");
  ShmOptions o = test_options();
  o.zerocopy_bytes = 4096;
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, o);
    for (int64_t count : {1023, 1024}) {
      auto* x = static_cast<float*>(b->allocate(count * 4));
      for (int64_t i = 0; i < count; ++i) x[i] = static_cast<float>(i + me);
      CollectiveDesc d;
      d.count = count;
      d.send = d.recv = x;
      const uint64_t before = zero_copy_calls(*b);
      ASSERT_EQ(b->run(d)->error(), nullptr);
      EXPECT_EQ(zero_copy_calls(*b) - before, count * 4 >= 4096 ? 1u : 0u) << count;
      EXPECT_EQ(x[count - 1], static_cast<float>(2 * (count - 1) + 1));
      b->release(x);
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ShmArena, AllocateAlignsReusesAndCoalesces) {
  const std::string job = unique_job("a");
  ShmOptions o = test_options();
  o.arena_bytes = 64 << 10;
  auto result = testing::run_threads(1, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, o);
    void* a = b->allocate(1000);
    void* z = b->allocate(0);
    void* c = b->allocate(64);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(z, nullptr);
    EXPECT_NE(a, z);
    EXPECT_NE(z, c);
    for (void* p : {a, z, c}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::memset(a, 1, 1000);  // the pages are reserved: writable
    b->release(a);
    EXPECT_EQ(b->allocate(900), a) << "first fit reuses the released block";
    b->release(a);
    b->release(z);
    b->release(c);
    void* whole = b->allocate(64 << 10);  // needs every block coalesced again
    EXPECT_EQ(whole, a);
    b->release(whole);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ShmArena, FullArenaIsOutOfMemoryNamingSizes) {
  const std::string job = unique_job("f");
  ShmOptions o = test_options();
  o.arena_bytes = 64 << 10;
  auto result = testing::run_threads(1, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, o);
    void* all = b->allocate(60 << 10);
    ASSERT_NE(all, nullptr);
    try {
      b->allocate(8192);
      ADD_FAILURE() << "allocate past the arena succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
      EXPECT_NE(e.message().find("allocate(8192 bytes)"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("arena of 65536 bytes"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("4096 bytes free"), std::string::npos) << e.message();
    }
    EXPECT_NE(b->allocate(4096), nullptr) << "what is left still fits";
    int local = 0;
    try {
      b->release(&local);
      ADD_FAILURE() << "release of a foreign pointer succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(e.message().find("release("), std::string::npos) << e.message();
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(ShmArena, NoArenaMeansNoSharedAllocation) {
  const std::string job = unique_job("n");
  ShmOptions o = test_options();
  o.arena_bytes = 0;
  auto result = testing::run_threads(2, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, o);
    EXPECT_FALSE(b->capabilities().can_allocate_shared);
    EXPECT_EQ(b->allocate(64), nullptr);
    float x[4] = {1, 2, 3, 4};
    CollectiveDesc d;
    d.count = 4;
    d.send = d.recv = x;
    ASSERT_EQ(b->run(d)->error(), nullptr);
    EXPECT_EQ(x[3], 8.0f);
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// ---- empty_shared on ProcessGroup ----

TEST(EmptyShared, CollectivesOnSharedTensorsMatchOrdinaryOnes) {
  // Only the shared tensors may read in place here (the kernel copy would read ordinary ones).
  PatchEnvironment env{{"BRAID_SHM_KERNEL_COPY_BYTES", "0"}};
  auto result = testing::run_threads(3, [](int me, int size, std::shared_ptr<Store> store) {
    auto pg = testing::make_group(me, size, store);
    const Shape shape = {257, 129};
    Tensor shared = empty_shared(pg, shape, DType::kF32);
    Tensor ordinary = Tensor::empty(shape, DType::kF32);
    ASSERT_TRUE(pg->backend().capabilities().can_allocate_shared);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(shared.data_ptr()) % 64, 0u);
    fill(static_cast<uint8_t*>(shared.data_ptr()), DType::kF32, shared.numel(), 7 + me);
    fill(static_cast<uint8_t*>(ordinary.data_ptr()), DType::kF32, ordinary.numel(), 7 + me);
    const uint64_t before = zero_copy_calls(pg->backend());
    pg->all_reduce(shared);
    EXPECT_EQ(zero_copy_calls(pg->backend()), before + 1);
    pg->all_reduce(ordinary);
    EXPECT_EQ(std::memcmp(shared.data_ptr(), ordinary.data_ptr(), shared.nbytes()), 0);
    // all_gather_into from a shared input into a shared output.
    Tensor gathered = empty_shared(pg, {size * 257, 129}, DType::kF32);
    Tensor gathered_plain = Tensor::empty({size * 257, 129}, DType::kF32);
    pg->all_gather_into(gathered, shared);
    pg->all_gather_into(gathered_plain, ordinary);
    EXPECT_EQ(std::memcmp(gathered.data_ptr(), gathered_plain.data_ptr(), gathered.nbytes()), 0);
    EXPECT_EQ(zero_copy_calls(pg->backend()), before + 2);
    // The tensor keeps the group (and its mapping) alive after the caller's handle goes.
    std::weak_ptr<ProcessGroup> weak = pg;
    pg.reset();
    EXPECT_FALSE(weak.expired());
    static_cast<float*>(shared.data_ptr())[0] = 1.0f;
    gathered = Tensor();
    shared = Tensor();
    EXPECT_TRUE(weak.expired());
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(EmptyShared, FallsBackToCpuMemoryWithoutAnArena) {
  ::setenv("BRAID_SHM_ARENA_BYTES", "0", 1);
  auto result = testing::run_threads(2, [](int me, int size, std::shared_ptr<Store> store) {
    auto pg = testing::make_group(me, size, store);
    EXPECT_FALSE(pg->backend().capabilities().can_allocate_shared);
    Tensor t = empty_shared(pg, {5}, DType::kI32);
    ASSERT_TRUE(t.defined());
    EXPECT_EQ(t.numel(), 5);
    for (int i = 0; i < 5; ++i) t.data<int32_t>()[i] = i + me;
    pg->all_reduce(t);
    EXPECT_EQ(t.data<int32_t>()[4], 9);
  });
  ::unsetenv("BRAID_SHM_ARENA_BYTES");
  EXPECT_TRUE(result.ok()) << result.summary();
}

TEST(EmptyShared, NullGroupIsInvalidArgument) {
  try {
    empty_shared(nullptr, {4});
    ADD_FAILURE() << "empty_shared(nullptr) succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("group is null"), std::string::npos) << e.message();
  }
}

TEST(EmptyShared, FullArenaIsOutOfMemory) {
  ::setenv("BRAID_SHM_ARENA_BYTES", "65536", 1);
  auto result = testing::run_threads(1, [](int me, int size, std::shared_ptr<Store> store) {
    auto pg = testing::make_group(me, size, store);
    Tensor a = empty_shared(pg, {16384}, DType::kF32);  // the whole arena
    try {
      empty_shared(pg, {1}, DType::kF32);
      ADD_FAILURE() << "empty_shared past the arena succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
      EXPECT_NE(e.message().find("allocate(4 bytes)"), std::string::npos) << e.message();
    }
    a = Tensor();  // released: the arena is free again
    EXPECT_NO_THROW(empty_shared(pg, {16384}, DType::kF32));
  });
  ::unsetenv("BRAID_SHM_ARENA_BYTES");
  EXPECT_TRUE(result.ok()) << result.summary();
}

}  // namespace
}  // namespace braid
