// The device runtime registry: one slot per DeviceType. This is the one file that knows what
// was compiled in (braid/core/config.h); every other file asks is_runtime_built() or
// device_runtime() instead of testing BRAID_HAVE_* itself.
//
// cpu and meta are registered when the registry is first used; cuda then too when the program
// links braid::core_cuda. In libbraid.so, which holds no component, cuda is the plugin
// libbraid_core_cuda.so beside it, loaded the first time a cuda runtime is asked for
// (braid/core/plugin.h). Another GPU runtime registers itself through
// register_device_runtime(); until one has, device_runtime() explains why there is none: not
// configured, not linked, its plugin did not load, or configured but not registered.
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "braid/core/allocator.h"
#include "braid/core/config.h"
#include "braid/core/device_runtime.h"
#include "braid/core/error.h"
#include "braid/core/plugin.h"

namespace braid {
class DeviceRuntime;
}

// The core_cuda component's entry point (cuda_runtime.cc): a new cuda runtime the caller owns.
// A weak reference: null unless the program links braid::core_cuda (core/CMakeLists.txt).
extern "C" [[gnu::weak]] braid::DeviceRuntime* braid_core_make_cuda_runtime();

namespace braid {

namespace detail {
// Defined in cpu_runtime.cc and meta_runtime.cc; only this file creates them.
std::unique_ptr<DeviceRuntime> make_cpu_runtime();
std::unique_ptr<DeviceRuntime> make_meta_runtime();
}  // namespace detail

namespace {

struct Slot {
  std::atomic<DeviceRuntime*> runtime{nullptr};
  // Devices of the type, counted on first lookup (-1: not yet). Device visibility is fixed
  // for a process (CUDA_VISIBLE_DEVICES is read once by the driver).
  std::atomic<int> count{-1};
};

struct Registry {
  std::mutex mu;  // serializes registration; lookups read the atomics
  std::array<Slot, kNumDeviceTypes> slots;
  std::array<std::unique_ptr<DeviceRuntime>, kNumDeviceTypes> owned;

  void add(std::unique_ptr<DeviceRuntime> runtime) {
    const int t = static_cast<int>(runtime->type());
    BRAID_CHECK(t >= 0 && t < kNumDeviceTypes, kInvalidArgument, "device runtime type ", t,
                " is not a known DeviceType");
    std::lock_guard<std::mutex> lock(mu);
    BRAID_CHECK(!owned[t], kInvalidArgument, "a ", device_type_name(runtime->type()),
                " device runtime is already registered; each type takes one");
    owned[t] = std::move(runtime);
    slots[t].runtime.store(owned[t].get(), std::memory_order_release);
  }
};

Registry& registry() {
  // Never destroyed: allocators hold runtime pointers until the process ends.
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->add(detail::make_cpu_runtime());
    reg->add(detail::make_meta_runtime());
    // Constructing it calls nothing in CUDA: a process without a driver or GPU is not slowed
    // or broken by it, and device_runtime(kCUDA) then says why no device is visible.
    if (braid_core_make_cuda_runtime != nullptr) {
      reg->add(std::unique_ptr<DeviceRuntime>(braid_core_make_cuda_runtime()));
    }
    return reg;
  }();
  return *r;
}

constexpr const char* kCudaEntry = "braid_core_make_cuda_runtime";

// Whether cuda comes as a plugin: built, not linked into this program, braid in libbraid.so.
bool cuda_is_plugin() {
  return BRAID_HAVE_CUDA && braid_core_make_cuda_runtime == nullptr &&
         !shared_library_dir().empty();
}

// Loads the core_cuda plugin and registers its runtime, once per process. Loading it calls
// nothing in CUDA (as linking it does not), so a machine without a driver loads it fine.
void load_cuda_plugin() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!cuda_is_plugin()) return;
    const PluginLoad& load = load_component_plugin("core_cuda", kCudaEntry);
    if (load.entry == nullptr) return;
    auto make = reinterpret_cast<DeviceRuntime* (*)()>(load.entry);
    registry().add(std::unique_ptr<DeviceRuntime>(make()));
  });
}

// The runtime in `type`'s slot, loading a plugin first where the type has one.
DeviceRuntime* find_runtime(DeviceType type) {
  Slot& slot = registry().slots[static_cast<int>(type)];
  DeviceRuntime* rt = slot.runtime.load(std::memory_order_acquire);
  if (rt == nullptr && type == DeviceType::kCUDA && cuda_is_plugin()) {
    load_cuda_plugin();
    rt = slot.runtime.load(std::memory_order_acquire);
  }
  return rt;
}

// Why a type has no runtime, for the kNotSupported message.
std::string missing_reason(DeviceType type) {
  if (type == DeviceType::kCUDA && cuda_is_plugin()) {
    const PluginLoad& load = load_component_plugin("core_cuda", kCudaEntry);
    return "cuda: the runtime is built but its plugin " + load.path +
           " could not be loaded: " + load.error + " (docs/layout.md, \"Components\")";
  }
  switch (type) {
    case DeviceType::kXPU:
      return "xpu: not built: braid has no SYCL runtime yet";
    case DeviceType::kCUDA:
      return BRAID_HAVE_CUDA ? "cuda: the runtime is built but this program does not link its "
                               "component: link braid::core_cuda (braid::braid links every "
                               "component; docs/layout.md, \"Components\")"
                             : "cuda: the runtime is not available in this build (configured "
                               "without CUDA; see BRAID_WITH_CUDA)";
    case DeviceType::kHIP:
      return BRAID_HAVE_HIP ? "hip: the runtime is not available in this build (HIP was found "
                              "at configure time but no hip runtime is registered)"
                            : "hip: the runtime is not available in this build (configured "
                              "without HIP; see BRAID_WITH_HIP)";
    default:
      return std::string(device_type_name(type)) + ": no runtime registered";
  }
}

}  // namespace

DeviceRuntime& device_runtime(DeviceType type) {
  const int t = static_cast<int>(type);
  BRAID_CHECK(t >= 0 && t < kNumDeviceTypes, kInvalidArgument, "device type ", t,
              " is not a known DeviceType");
  Slot& slot = registry().slots[t];
  DeviceRuntime* rt = find_runtime(type);
  BRAID_CHECK(rt != nullptr, kNotSupported, missing_reason(type));
  int count = slot.count.load(std::memory_order_relaxed);
  if (count < 0) {
    count = rt->device_count();
    slot.count.store(count, std::memory_order_relaxed);
  }
  if (count <= 0) {
    const std::string why = rt->unavailable_reason();
    BRAID_FAIL(kNotSupported, device_type_name(type),
               ": the runtime is built but no device is visible to this process",
               why.empty() ? "" : " (" + why + ")");
  }
  return *rt;
}

bool is_runtime_built(DeviceType type) {
  const int t = static_cast<int>(type);
  if (t < 0 || t >= kNumDeviceTypes) return false;
  return find_runtime(type) != nullptr;
}

void register_device_runtime(std::unique_ptr<DeviceRuntime> runtime) {
  BRAID_CHECK(runtime != nullptr, kInvalidArgument,
              "register_device_runtime: the runtime is null; expected a DeviceRuntime");
  registry().add(std::move(runtime));
}

// DeviceRuntime's optional members that need more than the header includes.
void DeviceRuntime::set_current_device(int index) {
  const int count = device_count();
  BRAID_CHECK(index >= 0 && index < count, kOutOfRange, "set_current_device: device ",
              device_type_name(type()), ":", index, " does not exist; ", count, " ",
              device_type_name(type()), " device(s) are visible");
}

std::unique_ptr<Allocator> DeviceRuntime::create_allocator(int) {
  return nullptr;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Stream stream) {
  // Meta first: it refuses every copy with the clearest message. Otherwise the side that is
  // not the host owns the copy (it knows how to reach host memory); host to host is cpu's.
  DeviceType owner = DeviceType::kCPU;
  if (dst_device.is_meta() || src_device.is_meta()) {
    owner = DeviceType::kMeta;
  } else if (!dst_device.is_host()) {
    owner = dst_device.type;
  } else if (!src_device.is_host()) {
    owner = src_device.type;
  }
  device_runtime(owner).copy(dst, dst_device, src, src_device, bytes, stream);
}

}  // namespace braid
