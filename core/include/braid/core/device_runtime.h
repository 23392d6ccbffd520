// SPDX-License-Identifier: Apache-2.0
// DeviceRuntime: the small table of operations each device type provides (design.md,
// "Device, DeviceRuntime"), registered in a fixed registry indexed by DeviceType.
// cpu and meta are always registered; cuda and hip are registered by their runtimes when
// built (core/src/runtime_registry.cc is the one file that knows what was compiled in);
// xpu reports "not built" until a SYCL toolchain is supported.
//
// Blocking rules: allocate/free/memset/copy with a null stream are synchronous with
// respect to the host; with a stream they are ordered on that stream and may return early.
// Every wait (stream, event or device synchronize) returns or throws kTimeout by a deadline
// (design.md, "No hangs"); CPU work is immediate.
//
// Members marked (optional) have a default that is right for a runtime whose work completes
// when it is enqueued (cpu, meta); GPU runtimes override them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "braid/core/device.h"

namespace braid {

// An ordered queue of device work. On CPU every operation completes before it returns.
struct Stream {
  Device device;
  void* handle = nullptr;  // backend-specific; null is the device's default stream
};

// A marker recorded on a stream: wait on it from another stream or the host.
struct Event {
  Device device;
  void* handle = nullptr;
};

struct DeviceProperties {
  std::string name;         // "cpu", "NVIDIA H200", ...
  size_t total_memory = 0;  // bytes; for cpu the physical memory
  int compute_major = 0;    // GPU compute capability; 0 on cpu
  int compute_minor = 0;
  int multiprocessors = 0;  // SMs / CUs; for cpu the online cores
};

class Allocator;

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual DeviceType type() const = 0;
  // Number of devices of this type visible to the process (1 for cpu and meta).
  virtual int device_count() const = 0;
  virtual DeviceProperties properties(int index) const = 0;

  // Raw memory, no caching (the Allocator caches on top). bytes == 0 may return nullptr.
  // Throws kOutOfMemory naming the size and device.
  virtual void* raw_allocate(int index, size_t bytes) = 0;
  virtual void raw_free(int index, void* ptr, size_t bytes) = 0;

  // Copies bytes between this runtime's memory and host memory or its own memory.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                    Stream stream) = 0;
  virtual void memset(void* dst, int index, int value, size_t bytes, Stream stream) = 0;

  virtual Stream create_stream(int index) = 0;
  virtual void destroy_stream(Stream stream) = 0;
  virtual void synchronize_stream(Stream stream) = 0;
  virtual void synchronize_device(int index) = 0;

  virtual Event create_event(int index) = 0;
  virtual void destroy_event(Event event) = 0;
  virtual void record_event(Event event, Stream stream) = 0;
  // Makes `stream` wait for `event` without blocking the host.
  virtual void stream_wait_event(Stream stream, Event event) = 0;
  virtual void synchronize_event(Event event) = 0;

  // (optional) The waits above with an explicit deadline instead of the runtime's default
  // (cuda: BRAID_DEVICE_TIMEOUT). Throw kTimeout naming the stream or event and its device.
  virtual void synchronize_stream_for(Stream stream, std::chrono::milliseconds timeout) {
    synchronize_stream(stream);
  }
  virtual void synchronize_event_for(Event event, std::chrono::milliseconds timeout) {
    synchronize_event(event);
  }

  // (optional) Why device_count() is 0, in the runtime's own words ("cudaGetDeviceCount
  // returned cudaErrorInsufficientDriver ..."); empty when devices exist or nothing is known.
  // device_runtime() adds it to its kNotSupported message.
  virtual std::string unavailable_reason() const { return {}; }

  // (optional) The calling thread's current device index (cudaGetDevice) and setting it.
  // set_current_device throws kOutOfRange for an index that does not exist.
  virtual int current_device() const { return 0; }
  virtual void set_current_device(int index);

  // (optional) Lets device `index` access memory of device `peer` directly (kernels and
  // copies). Returns true when enabled (also when it already was, or index == peer), false
  // when the hardware cannot; copies between such devices still work, staged by the driver.
  virtual bool enable_peer_access(int index, int peer) { return index == peer; }

  // (optional) An allocator for device `index` that replaces the generic caching allocator
  // get_allocator() builds over raw_allocate (a GPU runtime's stream-aware one); nullptr:
  // use the generic one. Called once per device; the caller owns the result.
  virtual std::unique_ptr<Allocator> create_allocator(int index);

  // (optional) The process-wide allocator of page-locked host memory that this runtime's
  // copies can read and write asynchronously, or nullptr when it has none. Never destroyed.
  virtual Allocator* pinned_host_allocator() { return nullptr; }
};

// The runtime for a device type. Throws kNotSupported when that type was not built
// ("xpu: not built: braid has no SYCL runtime yet") or has no devices.
DeviceRuntime& device_runtime(DeviceType type);
// True when a runtime for the type is registered (built), whether or not devices exist.
bool is_runtime_built(DeviceType type);

// Called once by a compiled-in GPU runtime (see runtime_registry.cc). Replaces none.
void register_device_runtime(std::unique_ptr<DeviceRuntime> runtime);

// Convenience: copy between any two devices through their runtimes (host staging when
// neither side is the host is the runtime's business).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Stream stream = {});

}  // namespace braid
