// The cuda DeviceRuntime and its stream-aware caching allocator on a real GPU (label gpu).
// Every test starts with BRAID_REQUIRE_GPU(): without a usable device it is skipped with CUDA's
// own reason (the build machines have the toolkit but no driver). CUDA is called directly only
// to set up situations (a stream held back by a host function) and to check results.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/core/stream.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Why the tests cannot run here, or "" when a device is usable. Without a driver
// cudaGetDeviceCount returns an error (35) and leaves the count unset: it starts at 0.
std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable CUDA device: cudaGetDeviceCount returned ") +
           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (n == 0) return "no CUDA device (cudaGetDeviceCount found 0)";
  return "";
}

// Control flow only (GTEST_SKIP returns from the test).
#define BRAID_REQUIRE_GPU()                                                         \
  do {                                                                              \
    if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

template <typename Fn>
Error capture(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected braid::Error";
  return Error(ErrorKind::kInternal, "no error");
}

const Device kGpu0(DeviceType::kCUDA, 0);

DeviceRuntime& cuda() {
  return device_runtime(DeviceType::kCUDA);
}

// Holds a stream back: a host function enqueued on it waits until the gate opens (at the
// latest when the Gate is destroyed, or after 20 s, so a failing test cannot hang the rest).
class Gate {
 public:
  explicit Gate(Stream s) {
    const cudaError_t err = cudaLaunchHostFunc(static_cast<cudaStream_t>(s.handle), &wait, this);
    EXPECT_EQ(cudaSuccess, err);
    if (err != cudaSuccess) left_.store(true);  // nothing to wait for
  }
  ~Gate() {
    open();
    while (!left_.load()) std::this_thread::sleep_for(1ms);
  }
  void open() { open_.store(true); }

 private:
  static void CUDART_CB wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!g->open_.load() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    g->left_.store(true);
  }
  std::atomic<bool> open_{false}, left_{false};
};

// Streams destroyed at the end of a test.
struct OwnedStream {
  explicit OwnedStream(int index = 0) : s(cuda().create_stream(index)) {}
  ~OwnedStream() { cuda().destroy_stream(s); }
  Stream s;
};

TEST(CudaRuntime, CountAndProperties) {
  BRAID_REQUIRE_GPU();
  int n = 0;
  ASSERT_EQ(cudaSuccess, cudaGetDeviceCount(&n));
  EXPECT_EQ(cuda().device_count(), n);
  EXPECT_TRUE(cuda().unavailable_reason().empty());
  for (int i = 0; i < n; ++i) {
    const DeviceProperties p = cuda().properties(i);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, size_t{1} << 30);
    EXPECT_GE(p.compute_major, 5);
    EXPECT_GT(p.multiprocessors, 0);
    int sms = 0;
    ASSERT_EQ(cudaSuccess, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i));
    EXPECT_EQ(p.multiprocessors, sms);
  }
  const Error e = capture([n] { cuda().properties(n); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
  EXPECT_THAT(e.message(), HasSubstr("cuda:" + std::to_string(n)));
}

TEST(CudaRuntime, CurrentDeviceAndTheGuardRestoringIt) {
  BRAID_REQUIRE_GPU();
  const int last = cuda().device_count() - 1;
  cuda().set_current_device(0);
  EXPECT_EQ(cuda().current_device(), 0);
  void* p = cuda().raw_allocate(last, 256);  // sets cuda:last for the call only
  EXPECT_EQ(cuda().current_device(), 0);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaSuccess, cudaPointerGetAttributes(&attr, p));
  EXPECT_EQ(attr.device, last);
  cuda().raw_free(last, p, 256);
  EXPECT_EQ(capture([last] { cuda().set_current_device(last + 1); }).kind(),
            ErrorKind::kOutOfRange);
}

TEST(CudaRuntime, CopyRoundTripHostDeviceDeviceHost) {
  BRAID_REQUIRE_GPU();
  const size_t n = (size_t{1} << 20) + 3;
  std::vector<uint8_t> host(n), back(n, 0);
  std::iota(host.begin(), host.end(), uint8_t{7});
  const int other = cuda().device_count() > 1 ? 1 : 0;
  const Device gpu_other(DeviceType::kCUDA, other);
  void* a = cuda().raw_allocate(0, n);
  void* b = cuda().raw_allocate(0, n);
  void* c = cuda().raw_allocate(other, n);
  // Null stream: each copy has finished when it returns.
  copy_bytes(a, kGpu0, host.data(), kCPU, n);
  copy_bytes(b, kGpu0, a, kGpu0, n);
  copy_bytes(c, gpu_other, b, kGpu0, n);  // peer when there are two devices
  copy_bytes(back.data(), kCPU, c, gpu_other, n);
  EXPECT_EQ(back, host);
  // On a stream: ordered there, finished after synchronize_stream.
  OwnedStream s;
  std::vector<uint8_t> back2(n, 0);
  cuda().memset(b, 0, 0, n, s.s);
  copy_bytes(b, kGpu0, c, gpu_other, n, s.s);
  copy_bytes(back2.data(), kCPU, b, kGpu0, n, s.s);
  cuda().synchronize_stream(s.s);
  EXPECT_EQ(back2, host);
  // A stream of a device the copy does not touch is refused.
  if (other != 0) {
    OwnedStream s1(1);
    const Error e = capture([&] { copy_bytes(b, kGpu0, host.data(), kCPU, n, s1.s); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("cuda:1"));
  }
  cuda().raw_free(0, a, n);
  cuda().raw_free(0, b, n);
  cuda().raw_free(other, c, n);
}

TEST(CudaRuntime, Memset) {
  BRAID_REQUIRE_GPU();
  const size_t n = 4099;
  void* d = cuda().raw_allocate(0, n);
  cuda().memset(d, 0, 0xAB, n, Stream{});
  cuda().memset(static_cast<char*>(d) + 100, 0, 0x01, 10, Stream{});
  std::vector<uint8_t> back(n);
  copy_bytes(back.data(), kCPU, d, kGpu0, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], (i >= 100 && i < 110) ? 0x01 : 0xAB) << "byte " << i;
  }
  cuda().raw_free(0, d, n);
}

// Stream b waits for an event recorded on a, which is held back: b's copy must see a's memset.
// The copy goes to pinned memory: into pageable memory cudaMemcpyAsync returns only when the
// copy is done, which here would be never.
TEST(CudaRuntime, EventOrdersTwoStreams) {
  BRAID_REQUIRE_GPU();
  const size_t n = 1 << 16;
  OwnedStream a, b;
  void* d = cuda().raw_allocate(0, n);
  cuda().memset(d, 0, 0, n, Stream{});
  const Event e = cuda().create_event(0);
  DataPtr pinned = pinned_host_allocator().allocate(n);
  std::memset(pinned.get(), 0xFF, n);
  {
    Gate gate(a.s);
    cuda().memset(d, 0, 0x5A, n, a.s);
    cuda().record_event(e, a.s);
    cuda().stream_wait_event(b.s, e);
    copy_bytes(pinned.get(), kCPU, d, kGpu0, n, b.s);
    EXPECT_EQ(cudaErrorNotReady, cudaStreamQuery(static_cast<cudaStream_t>(b.s.handle)));
    (void)cudaGetLastError();
    gate.open();
  }
  cuda().synchronize_stream(b.s);
  cuda().synchronize_event(e);
  const auto* back = static_cast<const uint8_t*>(pinned.get());
  EXPECT_EQ(std::vector<uint8_t>(back, back + n), std::vector<uint8_t>(n, 0x5A));
  cuda().destroy_event(e);
  cuda().raw_free(0, d, n);
  cuda().synchronize_device(0);
}

TEST(CudaRuntime, WaitsHaveADeadline) {
  BRAID_REQUIRE_GPU();
  OwnedStream s;
  const Event e = cuda().create_event(0);
  {
    Gate gate(s.s);
    cuda().record_event(e, s.s);
    const auto start = std::chrono::steady_clock::now();
    const Error se = capture([&] { cuda().synchronize_stream_for(s.s, 50ms); });
    EXPECT_EQ(se.kind(), ErrorKind::kTimeout);
    EXPECT_THAT(se.message(), HasSubstr("synchronize_stream"));
    EXPECT_THAT(se.message(), HasSubstr("on cuda:0"));
    const Error ee = capture([&] { cuda().synchronize_event_for(e, 50ms); });
    EXPECT_EQ(ee.kind(), ErrorKind::kTimeout);
    EXPECT_THAT(ee.message(), HasSubstr("event"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(cudaSuccess, cudaGetLastError());  // not-ready left no error behind
    gate.open();
  }
  cuda().synchronize_stream_for(s.s, 10s);
  cuda().synchronize_event_for(e, 10s);
  cuda().destroy_event(e);
}

TEST(CudaRuntime, OutOfMemoryIsKOutOfMemoryAndNamesTheDevice) {
  BRAID_REQUIRE_GPU();
  const size_t absurd = size_t{1} << 50;  // 1 PiB
  const Error e = capture([&] { cuda().raw_allocate(0, absurd); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
  EXPECT_THAT(e.message(), HasSubstr(std::to_string(absurd)));
  EXPECT_THAT(e.message(), HasSubstr("cuda:0"));
  EXPECT_THAT(e.message(), HasSubstr("bytes free of"));
  EXPECT_EQ(cudaSuccess, cudaGetLastError());  // cleared: the next launch check is clean
}

TEST(CudaRuntime, PeerAccess) {
  BRAID_REQUIRE_GPU();
  EXPECT_TRUE(cuda().enable_peer_access(0, 0));
  if (cuda().device_count() < 2) GTEST_SKIP() << "one device";
  int can = 0;
  ASSERT_EQ(cudaSuccess, cudaDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(cuda().enable_peer_access(0, 1), can != 0);
  EXPECT_EQ(cuda().enable_peer_access(0, 1), can != 0);  // already enabled: fine
  EXPECT_EQ(cudaSuccess, cudaGetLastError());
}

// --- the caching allocator: each test uses its own size class, so cached blocks of other
// tests in the same process do not interfere.

TEST(CudaAllocator, IsTheRuntimesAndReusesOnTheSameStreamAtOnce) {
  BRAID_REQUIRE_GPU();
  Allocator& a = get_allocator(kGpu0);
  EXPECT_EQ(a.device(), kGpu0);
  EXPECT_EQ(&a, &get_allocator(kGpu0));
  const AllocatorStats s0 = a.stats();
  void* first = nullptr;
  {
    DataPtr p = a.allocate(1000);  // class 1024
    first = p.get();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(p.device(), kGpu0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 256, 0u);
    const AllocatorStats s1 = a.stats();
    EXPECT_EQ(s1.current_bytes, s0.current_bytes + 1000);
    EXPECT_GE(s1.peak_bytes, s1.current_bytes);
    EXPECT_EQ(s1.num_allocations, s0.num_allocations + 1);
  }
  DataPtr q = a.allocate(1001);  // same class, same (default) stream: the same block, at once
  EXPECT_EQ(q.get(), first);
  const AllocatorStats s2 = a.stats();
  EXPECT_EQ(s2.cache_hits, s0.cache_hits + 1);
  EXPECT_EQ(s2.num_frees, s0.num_frees + 1);
  EXPECT_EQ(s2.current_bytes, s0.current_bytes + 1001);
  EXPECT_EQ(s2.reserved_bytes, a.stats().reserved_bytes);
}

TEST(CudaAllocator, AnotherStreamReusesOnlyAfterTheFreeHasCompleted) {
  BRAID_REQUIRE_GPU();
  Allocator& a = get_allocator(kGpu0);
  OwnedStream s1, s2, s3;
  void* first = nullptr;
  void* second = nullptr;
  DataPtr q;
  {
    Gate gate(s1.s);  // s1's work (and so the free's event) cannot complete yet
    {
      StreamGuard on1(s1.s);
      DataPtr p = a.allocate(5000);  // class 5120, home s1
      first = p.get();
    }
    StreamGuard on2(s2.s);
    q = a.allocate(5000);
    second = q.get();
    EXPECT_NE(second, first) << "a block still in use on s1 was handed to s2";
    gate.open();
  }
  cuda().synchronize_stream(s1.s);
  const AllocatorStats before = a.stats();
  StreamGuard on3(s3.s);
  DataPtr r = a.allocate(5000);  // s1's free has completed: any stream may take the block
  EXPECT_EQ(r.get(), first);
  EXPECT_EQ(a.stats().cache_hits, before.cache_hits + 1);
  EXPECT_EQ(a.stats().reserved_bytes, before.reserved_bytes);
}

TEST(CudaAllocator, RecordStreamHoldsTheBlockUntilThatStreamIsDone) {
  BRAID_REQUIRE_GPU();
  Allocator& a = get_allocator(kGpu0);
  OwnedStream home, user;
  StreamGuard on_home(home.s);
  void* first = nullptr;
  DataPtr q;
  {
    Gate gate(user.s);
    {
      DataPtr p = a.allocate(7000);  // class 7168
      first = p.get();
      a.record_stream(first, user.s);
    }
    q = a.allocate(7000);  // same stream, but `user` may still read the block
    EXPECT_NE(q.get(), first);
    gate.open();
  }
  cuda().synchronize_stream(user.s);
  DataPtr r = a.allocate(7000);
  EXPECT_EQ(r.get(), first);
  const Error e = capture([&] { a.record_stream(reinterpret_cast<char*>(r.get()) + 1, user.s); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
}

TEST(CudaAllocator, EmptyCacheReturnsCachedBlocks) {
  BRAID_REQUIRE_GPU();
  Allocator& a = get_allocator(kGpu0);
  a.empty_cache();
  const AllocatorStats s0 = a.stats();
  {
    DataPtr p = a.allocate(3 << 20);        // class 3 MiB
    DataPtr q = a.allocate((3 << 20) + 1);  // class 3.25 MiB
    EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes + (3 << 20) + (13 << 18));
  }
  EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes + (3 << 20) + (13 << 18));
  EXPECT_EQ(a.stats().current_bytes, s0.current_bytes);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, s0.reserved_bytes);
}

TEST(CudaAllocator, OutOfMemoryThenStillWorks) {
  BRAID_REQUIRE_GPU();
  Allocator& a = get_allocator(kGpu0);
  const Error e = capture([&] { a.allocate(size_t{1} << 50); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
  EXPECT_THAT(e.message(), HasSubstr("cuda:0"));
  EXPECT_THAT(e.message(), HasSubstr("after emptying the cache"));
  EXPECT_EQ(cudaSuccess, cudaGetLastError());
  DataPtr p = a.allocate(12345);
  EXPECT_NE(p.get(), nullptr);
  cuda().memset(p.get(), 0, 1, 12345, Stream{});
}

TEST(CudaAllocator, PinnedHostMemory) {
  BRAID_REQUIRE_GPU();
  Allocator& pinned = pinned_host_allocator();
  EXPECT_EQ(pinned.device(), kCPU);
  const size_t n = 1 << 20;
  DataPtr h = pinned.allocate(n);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaSuccess, cudaPointerGetAttributes(&attr, h.get()));
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  std::memset(h.get(), 0x3C, n);
  OwnedStream s;
  DataPtr d = get_allocator(kGpu0).allocate(n);
  copy_bytes(d.get(), kGpu0, h.get(), kCPU, n, s.s);
  std::vector<uint8_t> back(n);
  copy_bytes(back.data(), kCPU, d.get(), kGpu0, n, s.s);
  cuda().synchronize_stream(s.s);
  EXPECT_EQ(back, std::vector<uint8_t>(n, 0x3C));
  void* first = h.get();
  h.reset();
  EXPECT_EQ(pinned.allocate(n).get(), first);  // cached, same (default) stream
}

}  // namespace
}  // namespace braid
