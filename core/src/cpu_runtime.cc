// The cpu DeviceRuntime: 64-byte aligned host memory, memcpy/memset, and streams and events
// that are immediate (every operation has completed when it returns, so handles stay null and
// waits return at once).
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "braid/core/allocator.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"

namespace braid {
namespace {

void check_index(int index) {
  BRAID_CHECK(index == 0, kOutOfRange, "cpu device index ", index,
              " does not exist; the cpu runtime has only index 0");
}

void check_host(Device d, const char* role, size_t bytes) {
  BRAID_CHECK(!d.is_meta(), kNotSupported, "meta tensors have no data: cannot copy ", bytes,
              " bytes with meta as the ", role);
  BRAID_CHECK(d.is_cpu(), kNotSupported, "the cpu runtime cannot copy to or from ", d, " (", role,
              "); use copy_bytes, which picks the device's runtime");
}

class CpuRuntime final : public DeviceRuntime {
 public:
  DeviceType type() const override { return DeviceType::kCPU; }
  int device_count() const override { return 1; }

  DeviceProperties properties(int index) const override {
    check_index(index);
    DeviceProperties p;
    const std::string& brand = cpu_features().brand;
    p.name = brand.empty() ? std::string("cpu") : brand;
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
      p.total_memory = static_cast<size_t>(pages) * static_cast<size_t>(page_size);
    }
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    p.multiprocessors = cores > 0 ? static_cast<int>(cores) : 1;
    return p;
  }

  void* raw_allocate(int index, size_t bytes) override {
    check_index(index);
    if (bytes == 0) return nullptr;
    // Beyond PTRDIFF_MAX no allocation can succeed; refusing here also keeps sanitizer
    // allocators (which abort on absurd sizes) out of it.
    void* ptr = nullptr;
    const bool too_big = bytes > static_cast<size_t>(PTRDIFF_MAX) - kCpuAlignment;
    const int rc = too_big ? ENOMEM : ::posix_memalign(&ptr, kCpuAlignment, bytes);
    BRAID_CHECK(rc == 0 && ptr != nullptr, kOutOfMemory, "cannot allocate ", bytes,
                " bytes on device cpu: ", std::strerror(rc));
    return ptr;
  }

  void raw_free(int index, void* ptr, size_t bytes) override { std::free(ptr); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream stream) override {
    check_host(dst_device, "destination", bytes);
    check_host(src_device, "source", bytes);
    if (bytes == 0) return;
    BRAID_CHECK(dst != nullptr && src != nullptr, kInvalidArgument, "copy of ", bytes,
                " bytes on cpu: ", dst ? "source" : "destination",
                " pointer is null; expected valid memory");
    std::memcpy(dst, src, bytes);
  }

  void memset(void* dst, int index, int value, size_t bytes, Stream stream) override {
    check_index(index);
    if (bytes == 0) return;
    BRAID_CHECK(dst != nullptr, kInvalidArgument, "memset of ", bytes,
                " bytes on cpu: destination pointer is null; expected valid memory");
    std::memset(dst, value, bytes);
  }

  Stream create_stream(int index) override {
    check_index(index);
    return Stream{kCPU, nullptr};
  }
  void destroy_stream(Stream) override {}
  void synchronize_stream(Stream) override {}
  void synchronize_device(int index) override { check_index(index); }

  Event create_event(int index) override {
    check_index(index);
    return Event{kCPU, nullptr};
  }
  void destroy_event(Event) override {}
  void record_event(Event, Stream) override {}
  void stream_wait_event(Stream, Event) override {}
  void synchronize_event(Event) override {}
};

}  // namespace

namespace detail {
std::unique_ptr<DeviceRuntime> make_cpu_runtime() {
  return std::make_unique<CpuRuntime>();
}
}  // namespace detail

}  // namespace braid
