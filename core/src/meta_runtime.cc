// The meta DeviceRuntime: a device with shapes and no data, for building models too large to
// materialize so they can be sized. It allocates nothing (nullptr) and refuses every copy or
// memset, since there are no bytes to move.
#include <memory>

#include "braid/core/device_runtime.h"
#include "braid/core/error.h"

namespace braid {
namespace {

class MetaRuntime final : public DeviceRuntime {
 public:
  DeviceType type() const override { return DeviceType::kMeta; }
  int device_count() const override { return 1; }

  DeviceProperties properties(int index) const override {
    check_index(index);
    DeviceProperties p;
    p.name = "meta";
    return p;
  }

  void* raw_allocate(int index, size_t bytes) override {
    check_index(index);
    return nullptr;
  }
  void raw_free(int index, void* ptr, size_t bytes) override {}

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream stream) override {
    BRAID_FAIL(kNotSupported, "meta tensors have no data: cannot copy ", bytes, " bytes from ",
               src_device, " to ", dst_device);
  }
  void memset(void* dst, int index, int value, size_t bytes, Stream stream) override {
    BRAID_FAIL(kNotSupported, "meta tensors have no data: cannot memset ", bytes, " bytes on meta");
  }

  Stream create_stream(int index) override {
    check_index(index);
    return Stream{kMeta, nullptr};
  }
  void destroy_stream(Stream) override {}
  void synchronize_stream(Stream) override {}
  void synchronize_device(int index) override { check_index(index); }

  Event create_event(int index) override {
    check_index(index);
    return Event{kMeta, nullptr};
  }
  void destroy_event(Event) override {}
  void record_event(Event, Stream) override {}
  void stream_wait_event(Stream, Event) override {}
  void synchronize_event(Event) override {}

 private:
  static void check_index(int index) {
    BRAID_CHECK(index == 0, kOutOfRange, "meta device index ", index,
                " does not exist; the meta runtime has only index 0");
  }
};

}  // namespace

namespace detail {
std::unique_ptr<DeviceRuntime> make_meta_runtime() {
  return std::make_unique<MetaRuntime>();
}
}  // namespace detail

}  // namespace braid
