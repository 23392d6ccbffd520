// The device runtime registry, the cpu and meta runtimes, and copy_bytes routing.
#include "braid/core/device_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/cpu_features.h"
#include "braid/core/env_checks.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace detail {
size_t cpu_hugepage_bytes();  // cpu_runtime.cc, Note [Huge pages]
}  // namespace detail
namespace {

using ::testing::HasSubstr;

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

TEST(Registry, CpuAndMetaAreAlwaysBuilt) {
  EXPECT_TRUE(is_runtime_built(DeviceType::kCPU));
  EXPECT_TRUE(is_runtime_built(DeviceType::kMeta));
  EXPECT_EQ(device_runtime(DeviceType::kCPU).type(), DeviceType::kCPU);
  EXPECT_EQ(device_runtime(DeviceType::kMeta).type(), DeviceType::kMeta);
  EXPECT_EQ(device_runtime(DeviceType::kCPU).device_count(), 1);
  EXPECT_EQ(device_runtime(DeviceType::kMeta).device_count(), 1);
}

TEST(Registry, XpuIsNotBuilt) {
  EXPECT_FALSE(is_runtime_built(DeviceType::kXPU));
  const Error e = capture([] { device_runtime(DeviceType::kXPU); });
  EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
  EXPECT_EQ(e.message(), "xpu: not built: braid has no SYCL runtime yet");
}

TEST(Registry, UnregisteredGpuRuntimesSayTheyAreNotAvailable) {
  for (DeviceType t : {DeviceType::kCUDA, DeviceType::kHIP}) {
    if (is_runtime_built(t)) continue;  // a real (or the fake test) runtime is registered
    const Error e = capture([t] { device_runtime(t); });
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_THAT(e.message(), HasSubstr(std::string(device_type_name(t)) + ":"));
    EXPECT_THAT(e.message(), HasSubstr("not available in this build"));
  }
}

TEST(Registry, SecondRegistrationOfATypeIsRejected) {
  class Dummy final : public DeviceRuntime {
   public:
    DeviceType type() const override { return DeviceType::kCPU; }
    int device_count() const override { return 1; }
    DeviceProperties properties(int) const override { return {}; }
    void* raw_allocate(int, size_t) override { return nullptr; }
    void raw_free(int, void*, size_t) override {}
    void copy(void*, Device, const void*, Device, size_t, Stream) override {}
    void memset(void*, int, int, size_t, Stream) override {}
    Stream create_stream(int) override { return {}; }
    void destroy_stream(Stream) override {}
    void synchronize_stream(Stream) override {}
    void synchronize_device(int) override {}
    Event create_event(int) override { return {}; }
    void destroy_event(Event) override {}
    void record_event(Event, Stream) override {}
    void stream_wait_event(Stream, Event) override {}
    void synchronize_event(Event) override {}
  };
  DeviceRuntime* before = &device_runtime(DeviceType::kCPU);
  const Error e = capture([] { register_device_runtime(std::make_unique<Dummy>()); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_THAT(e.message(), HasSubstr("cpu device runtime is already registered"));
  EXPECT_EQ(&device_runtime(DeviceType::kCPU), before);
  EXPECT_EQ(capture([] { register_device_runtime(nullptr); }).kind(), ErrorKind::kInvalidArgument);
}

TEST(CpuRuntime, AllocatesAlignedWritableMemory) {
  DeviceRuntime& rt = device_runtime(DeviceType::kCPU);
  EXPECT_EQ(rt.raw_allocate(0, 0), nullptr);
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    void* p = rt.raw_allocate(0, bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    rt.memset(p, 0, 0xAB, bytes, {});
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0xAB);
    rt.raw_free(0, p, bytes);
  }
}

// The VMA holding `p` in /proc/self/smaps: its "THPeligible:" value, or -1 if not found.
[[maybe_unused]] int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > 8) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}

[[maybe_unused]] std::string thp_mode() {  // unused under AddressSanitizer
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  std::getline(f, text);
  const size_t open = text.find('['), close = text.find(']');
  return open == std::string::npos || close == std::string::npos
             ? std::string()
             : text.substr(open + 1, close - open - 1);
}

// Note [Huge pages]: large blocks are 2 MiB aligned mappings marked for transparent huge pages.
TEST(CpuRuntime, LargeBlocksAreHugePageAlignedAndEligible) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer every block comes from posix_memalign";
#else
  if (std::getenv("BRAID_CPU_HUGEPAGES")) GTEST_SKIP() << "BRAID_CPU_HUGEPAGES is set";
  DeviceRuntime& rt = device_runtime(DeviceType::kCPU);
  for (size_t bytes : {size_t{4} << 20, (size_t{9} << 20) + 3}) {
    auto* p = static_cast<unsigned char*>(rt.raw_allocate(0, bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u) << bytes;
    std::memset(p, 0x5A, bytes);  // the whole block is usable
    EXPECT_EQ(p[bytes - 1], 0x5A);
    const std::string mode = thp_mode();
    if (mode == "madvise" || mode == "always") {
      EXPECT_EQ(thp_eligible(p), 1) << mode;
    }
    rt.raw_free(0, p, bytes);
  }
  // Below the threshold: the ordinary 64-byte aligned heap block, not a mapping.
  void* small = rt.raw_allocate(0, size_t{1} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % kCpuAlignment, 0u);
  rt.raw_free(0, small, size_t{1} << 20);
#endif
}

// cpu_memory_on_huge_pages(): where the kernel's mode is "madvise", a large block and any range
// inside it, but not a heap block, a range that runs past the block, or the block once freed;
// every range where the mode is "always"; none where it is "never".
TEST(CpuRuntime, HugePageBlocksAreKnownByAddress) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer every block comes from posix_memalign";
#else
  if (std::getenv("BRAID_CPU_HUGEPAGES")) GTEST_SKIP() << "BRAID_CPU_HUGEPAGES is set";
  DeviceRuntime& rt = device_runtime(DeviceType::kCPU);
  const size_t bytes = (size_t{9} << 20) + 3;
  auto* p = static_cast<unsigned char*>(rt.raw_allocate(0, bytes));
  std::vector<unsigned char> heap(size_t{8} << 20);
  const std::string mode = thp_mode();
  EXPECT_FALSE(cpu_memory_on_huge_pages(nullptr, 1));
  if (mode == "never") {
    EXPECT_FALSE(cpu_memory_on_huge_pages(p, bytes));
  } else if (mode == "always") {
    EXPECT_TRUE(cpu_memory_on_huge_pages(p, bytes));
    EXPECT_TRUE(cpu_memory_on_huge_pages(heap.data(), heap.size()));
  } else {
    EXPECT_TRUE(cpu_memory_on_huge_pages(p, bytes)) << mode;
    EXPECT_TRUE(cpu_memory_on_huge_pages(p + 4096, size_t{1} << 20));
    EXPECT_FALSE(cpu_memory_on_huge_pages(p, bytes + 8192));  // past the block's last page
    EXPECT_FALSE(cpu_memory_on_huge_pages(p - 4096, 8192));   // before its start
    // A page past its end: no other block can start before p + 10 MiB (2 MiB aligned).
    EXPECT_FALSE(cpu_memory_on_huge_pages(p + (size_t{9} << 20) + 8192, 16));
    EXPECT_FALSE(cpu_memory_on_huge_pages(heap.data(), heap.size()));
  }
  rt.raw_free(0, p, bytes);
  if (mode != "always") EXPECT_FALSE(cpu_memory_on_huge_pages(p, bytes));
#endif
}

TEST(CpuRuntime, HugePageThresholdComesFromTheEnvironment) {
  const std::pair<const char*, size_t> cases[] = {
      {"", size_t{4} << 20}, {"0", 0}, {"64M", size_t{64} << 20}, {"1", size_t{2} << 20}};
  for (const auto& [text, want] : cases) {
    PatchEnvironment env{{"BRAID_CPU_HUGEPAGES", text}};
    EXPECT_EQ(detail::cpu_hugepage_bytes(), want) << text;
  }
  PatchEnvironment env{{"BRAID_CPU_HUGEPAGES", "on"}};
  const Error e = capture([&] { detail::cpu_hugepage_bytes(); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_THAT(e.message(), HasSubstr("BRAID_CPU_HUGEPAGES='on'"));
}

TEST(CpuRuntime, ImpossibleAllocationIsOutOfMemory) {
  const size_t huge = size_t{1} << 63;
  const Error e = capture([&] { device_runtime(DeviceType::kCPU).raw_allocate(0, huge); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
  EXPECT_THAT(e.message(), HasSubstr(std::to_string(huge)));
  EXPECT_THAT(e.message(), HasSubstr("cpu"));
}

TEST(CpuRuntime, BadIndexIsOutOfRange) {
  DeviceRuntime& rt = device_runtime(DeviceType::kCPU);
  const Error e = capture([&] { rt.raw_allocate(1, 8); });
  EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
  EXPECT_THAT(e.message(), HasSubstr("index 1"));
  EXPECT_EQ(capture([&] { rt.properties(2); }).kind(), ErrorKind::kOutOfRange);
}

TEST(CpuRuntime, CopyAndMemset) {
  std::vector<uint8_t> src(300), dst(300, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  copy_bytes(dst.data(), kCPU, src.data(), kCPU, src.size());
  EXPECT_EQ(dst, src);
  device_runtime(DeviceType::kCPU).memset(dst.data() + 10, 0, 0, 20, {});
  for (size_t i = 0; i < dst.size(); ++i) {
    EXPECT_EQ(dst[i], (i >= 10 && i < 30) ? 0 : src[i]) << i;
  }
  // Zero bytes with null pointers is a no-op; non-zero with null is an argument error.
  EXPECT_NO_THROW(copy_bytes(nullptr, kCPU, nullptr, kCPU, 0));
  EXPECT_EQ(capture([] { copy_bytes(nullptr, kCPU, "x", kCPU, 1); }).kind(),
            ErrorKind::kInvalidArgument);
}

TEST(CpuRuntime, StreamsAndEventsAreImmediate) {
  DeviceRuntime& rt = device_runtime(DeviceType::kCPU);
  Stream s = rt.create_stream(0);
  EXPECT_EQ(s.device, kCPU);
  Event e = rt.create_event(0);
  std::vector<int> a(16, 1), b(16, 0);
  rt.copy(b.data(), kCPU, a.data(), kCPU, a.size() * sizeof(int), s);
  rt.record_event(e, s);
  rt.stream_wait_event(Stream{}, e);
  rt.synchronize_event(e);
  rt.synchronize_stream(s);
  rt.synchronize_device(0);
  EXPECT_EQ(a, b);  // done before synchronize, and still done after
  rt.destroy_event(e);
  rt.destroy_stream(s);
}

TEST(CpuRuntime, PropertiesDescribeTheMachine) {
  const DeviceProperties p = device_runtime(DeviceType::kCPU).properties(0);
  const std::string& brand = cpu_features().brand;
  EXPECT_EQ(p.name, brand.empty() ? "cpu" : brand);
  EXPECT_GT(p.total_memory, size_t{64} << 20);
  EXPECT_GE(p.multiprocessors, 1);
  EXPECT_EQ(p.compute_major, 0);
}

TEST(MetaRuntime, AllocatesNothingAndRefusesData) {
  DeviceRuntime& rt = device_runtime(DeviceType::kMeta);
  EXPECT_EQ(rt.raw_allocate(0, 1 << 30), nullptr);
  rt.raw_free(0, nullptr, 1 << 30);
  EXPECT_EQ(rt.properties(0).name, "meta");
  char host[8] = {};
  for (auto fn : std::vector<std::function<void()>>{
           [&] { copy_bytes(host, kCPU, nullptr, kMeta, 8); },
           [&] { copy_bytes(nullptr, kMeta, host, kCPU, 8); },
           [&] { copy_bytes(nullptr, kMeta, nullptr, kMeta, 8); },
           [&] { rt.memset(nullptr, 0, 0, 8, {}); },
           [&] { device_runtime(DeviceType::kCPU).copy(host, kCPU, nullptr, kMeta, 8, {}); }}) {
    const Error e = capture(fn);
    EXPECT_EQ(e.kind(), ErrorKind::kNotSupported);
    EXPECT_THAT(e.message(), HasSubstr("meta tensors have no data"));
  }
}

// A stand-in GPU runtime: device memory is host memory it tracks, so the test can see that
// copy_bytes routed a copy through it and which way.
class FakeCuda final : public DeviceRuntime {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }
  int device_count() const override { return 2; }
  DeviceProperties properties(int index) const override {
    DeviceProperties p;
    p.name = "fake";
    p.compute_major = index == 0 ? 7 : 8;
    return p;
  }
  void* raw_allocate(int, size_t bytes) override { return bytes ? std::malloc(bytes) : nullptr; }
  void raw_free(int, void* p, size_t) override { std::free(p); }
  void copy(void* dst, Device dd, const void* src, Device sd, size_t bytes, Stream) override {
    ++copies;
    last_dst = dd;
    last_src = sd;
    std::memcpy(dst, src, bytes);
  }
  void memset(void* dst, int, int v, size_t bytes, Stream) override { std::memset(dst, v, bytes); }
  Stream create_stream(int i) override { return Stream{Device(DeviceType::kCUDA, i), nullptr}; }
  void destroy_stream(Stream) override {}
  void synchronize_stream(Stream) override {}
  void synchronize_device(int) override {}
  Event create_event(int i) override { return Event{Device(DeviceType::kCUDA, i), nullptr}; }
  void destroy_event(Event) override {}
  void record_event(Event, Stream) override {}
  void stream_wait_event(Stream, Event) override {}
  void synchronize_event(Event) override {}

  int copies = 0;
  Device last_dst, last_src;
};

// Registration is permanent for the process, so this runs last in this file and leaves the
// fake in place; tests that need cuda to be absent skip when it is registered.
TEST(RegistryWithFakeCuda, RegisteredRuntimeServesCopiesAndChecks) {
  if (is_runtime_built(DeviceType::kCUDA)) GTEST_SKIP() << "a cuda runtime is registered";
  auto owned = std::make_unique<FakeCuda>();
  FakeCuda* fake = owned.get();
  register_device_runtime(std::move(owned));
  EXPECT_TRUE(is_runtime_built(DeviceType::kCUDA));
  EXPECT_EQ(&device_runtime(DeviceType::kCUDA), fake);
  EXPECT_EQ(device_count(DeviceType::kCUDA), 2);
  EXPECT_TRUE(is_cuda_available());
  EXPECT_TRUE(is_bf16_available());  // device 1 has compute capability 8.x

  const Device gpu1(DeviceType::kCUDA, 1);
  int host_src = 1234, dev = 0, host_dst = 0;
  copy_bytes(&dev, gpu1, &host_src, kCPU, sizeof(int));  // host to device
  EXPECT_EQ(fake->last_dst, gpu1);
  EXPECT_EQ(fake->last_src, kCPU);
  copy_bytes(&host_dst, kCPU, &dev, gpu1, sizeof(int));  // device to host
  EXPECT_EQ(fake->last_src, gpu1);
  EXPECT_EQ(fake->copies, 2);
  EXPECT_EQ(host_dst, 1234);

  const Error again = capture([] { register_device_runtime(std::make_unique<FakeCuda>()); });
  EXPECT_EQ(again.kind(), ErrorKind::kInvalidArgument);
  EXPECT_THAT(again.message(), HasSubstr("cuda"));

  // The caching allocator serves any registered runtime; an index past the count is refused.
  Allocator& a = get_allocator(gpu1);
  EXPECT_EQ(a.device(), gpu1);
  {
    DataPtr p = a.allocate(100);
    EXPECT_NE(p.get(), nullptr);
  }
  EXPECT_EQ(a.stats().current_bytes, 0u);
  EXPECT_EQ(capture([] { get_allocator(Device(DeviceType::kCUDA, 2)); }).kind(),
            ErrorKind::kOutOfRange);
}

}  // namespace
}  // namespace braid
