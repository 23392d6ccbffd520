// The cpu DeviceRuntime: 64-byte aligned host memory, memcpy/memset, and streams and events
// that are immediate (every operation has completed when it returns, so handles stay null and
// waits return at once).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "braid/core/allocator.h"
#include "braid/core/cpu_features.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
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

// Note [Huge pages]: blocks of at least detail::cpu_hugepage_bytes() (default 4 MiB) come from
// mmap, 2 MiB aligned (whole base pages long), with madvise(MADV_HUGEPAGE), so that the kernel's
// transparent huge pages back them where it allows (Linux in "madvise" or "always" mode) - as
// PyTorch's THP_MEM_ALLOC_ENABLE does. A stream over a large tensor then takes one TLB entry per 2
// MiB instead of per 4 KiB (docs/environment.md, "cpu allocator": memcpy of 256 MiB +18%, the fused
// AdamW step +15-25%, medians of 6 alternating pairs). raw_free gets the block's size back from the
// allocator, so it knows which blocks were mapped. Under AddressSanitizer every block comes from
// posix_memalign, whose overflow checks the mapping would bypass.
constexpr size_t kHugePage = size_t{2} << 20;

// The blocks mapped for huge pages, start -> end, for cpu_memory_on_huge_pages().
struct HugeBlocks {
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> blocks;
};
HugeBlocks& huge_blocks() {
  static HugeBlocks* b = new HugeBlocks;  // never destroyed: blocks may be freed at exit
  return *b;
}

// The kernel's transparent huge page mode: the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise" or "never"); "" when it
// cannot be read.
const std::string& thp_mode() {
  static const std::string mode = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    std::getline(in, line);
    const size_t open = line.find('['), close = line.find(']');
    return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1)
                                                     : std::string();
  }();
  return mode;
}

}  // namespace

bool cpu_memory_on_huge_pages(const void* ptr, size_t bytes) {
  const std::string& mode = thp_mode();
  if (mode == "never" || ptr == nullptr) return false;
  if (mode == "always") return true;
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  HugeBlocks& h = huge_blocks();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.blocks.upper_bound(begin);
  if (it == h.blocks.begin()) return false;
  --it;
  return begin < it->second && bytes <= it->second - begin;  // it->first <= begin
}

namespace detail {
// The smallest block mapped with huge pages, from BRAID_CPU_HUGEPAGES (a byte count; unset:
// 4 MiB; 0: none; below 2 MiB: 2 MiB). Throws kInvalidArgument naming a bad value.
size_t cpu_hugepage_bytes() {
  const uint64_t v = get_env_bytes("BRAID_CPU_HUGEPAGES", uint64_t{4} << 20);
  return v == 0 ? 0 : std::max<size_t>(static_cast<size_t>(v), kHugePage);
}
}  // namespace detail

namespace {

size_t hugepage_bytes_from_env() {
#if defined(__SANITIZE_ADDRESS__)
  return 0;
#else
  return detail::cpu_hugepage_bytes();
#endif
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
    const bool too_big = bytes > static_cast<size_t>(PTRDIFF_MAX) - 2 * kHugePage;
    if (!too_big && mapped(bytes)) return map_huge(bytes);
    void* ptr = nullptr;
    const int rc = too_big ? ENOMEM : ::posix_memalign(&ptr, kCpuAlignment, bytes);
    BRAID_CHECK(rc == 0 && ptr != nullptr, kOutOfMemory, "cannot allocate ", bytes,
                " bytes on device cpu: ", std::strerror(rc));
    return ptr;
  }

  void raw_free(int index, void* ptr, size_t bytes) override {
    if (ptr != nullptr && mapped(bytes)) {
      {
        HugeBlocks& h = huge_blocks();
        std::lock_guard<std::mutex> lock(h.mu);
        h.blocks.erase(reinterpret_cast<uintptr_t>(ptr));
      }
      ::munmap(ptr, round_up(bytes));
    } else {
      std::free(ptr);
    }
  }

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

 private:
  // Note [Huge pages]. Read once: a block must be freed the way it was allocated.
  const size_t hugepage_bytes_ = hugepage_bytes_from_env();

  bool mapped(size_t bytes) const { return hugepage_bytes_ > 0 && bytes >= hugepage_bytes_; }
  // Whole base pages, not whole huge pages: the kernel backs the 2 MiB aligned ranges inside
  // the mapping with huge pages and a shorter tail with base pages, so nothing is wasted.
  static size_t round_up(size_t bytes) {
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }

  // A 2 MiB aligned mapping of round_up(bytes): map one huge page more, then unmap the
  // unaligned head and what lies past the end.
  static void* map_huge(size_t bytes) {
    const size_t size = round_up(bytes), span = size + kHugePage;
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BRAID_CHECK(raw != MAP_FAILED, kOutOfMemory, "cannot allocate ", bytes,
                " bytes on device cpu: ", std::strerror(errno));
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > base) ::munmap(raw, aligned - base);
    const uintptr_t tail = aligned + size, span_end = base + span;
    if (span_end > tail) ::munmap(reinterpret_cast<void*>(tail), span_end - tail);
    void* ptr = reinterpret_cast<void*>(aligned);
    // A hint: without THP the pages stay 4 KiB. Where the kernel refuses it, the block is not
    // recorded as one on huge pages.
    if (::madvise(ptr, size, MADV_HUGEPAGE) == 0) {
      HugeBlocks& h = huge_blocks();
      std::lock_guard<std::mutex> lock(h.mu);
      h.blocks[aligned] = aligned + size;
    }
    return ptr;
  }
};

}  // namespace

namespace detail {
std::unique_ptr<DeviceRuntime> make_cpu_runtime() {
  return std::make_unique<CpuRuntime>();
}
}  // namespace detail

}  // namespace braid
