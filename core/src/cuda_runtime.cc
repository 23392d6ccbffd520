// The cuda DeviceRuntime over the CUDA runtime API (cudart, linked shared; never the driver
// stub libcuda). Registered by runtime_registry.cc when the build has CUDA; constructing it
// calls nothing in CUDA, so a process without a driver or GPU only learns, when it asks, that
// no device is visible.
//
// Every call that touches a device sets it first with a DeviceGuard (cuda_check.h) and puts the
// caller's device back afterwards. Streams are created non-blocking (no implicit
// synchronization with the legacy default stream), events without timing. The null Stream
// handle is the device's default stream: copies and memsets on it are waited for before they
// return. Every wait polls with a deadline (Note [Bounded waits]).
#include <cuda.h>  // driver types for the entry points below; libcuda itself is never linked
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "braid/core/allocator.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"
#include "cuda_allocator.h"
#include "cuda_check.h"

namespace braid {
namespace cuda_detail {
namespace {

// Note [Restoring the device]: since CUDA 12, cudaSetDevice creates the device's primary
// context. A thread that never used CUDA reports device 0 from cudaGetDevice without a context
// there; restoring "device 0" after work on cuda:3 would create a context (hundreds of MiB) on
// GPU 0 in every process of a job. So, as c10's MaybeSetDevice, the guard restores only a
// device whose primary context is active, asked through the driver's
// cuDevicePrimaryCtxGetState, reached with cudaGetDriverEntryPointByVersion so that nothing
// links libcuda. Without the entry points (an old driver) the guard always restores.
using CuDeviceGet = CUresult (*)(CUdevice*, int);
using CuPrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);

struct DriverEntryPoints {
  CuDeviceGet device_get = nullptr;
  CuPrimaryCtxGetState primary_ctx_get_state = nullptr;
};

const DriverEntryPoints& driver_entry_points() {
  static const DriverEntryPoints points = [] {
    DriverEntryPoints p;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &fn, CUDART_VERSION, cudaEnableDefault,
                                         &status) == cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      p.device_get = reinterpret_cast<CuDeviceGet>(fn);
    }
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, CUDART_VERSION,
                                         cudaEnableDefault, &status) == cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      p.primary_ctx_get_state = reinterpret_cast<CuPrimaryCtxGetState>(fn);
    }
    (void)cudaGetLastError();
    return p;
  }();
  return points;
}

bool has_primary_context(int index) {
  const DriverEntryPoints& d = driver_entry_points();
  if (!d.device_get || !d.primary_ctx_get_state) return true;  // cannot tell: restore
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  if (d.device_get(&dev, index) != CUDA_SUCCESS) return true;
  if (d.primary_ctx_get_state(dev, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

}  // namespace

DeviceGuard::DeviceGuard(int index, const char* op) {
  int current = 0;
  BRAID_CUDART_CHECK(op, cudaGetDevice(&current));
  if (current == index) return;
  BRAID_CUDART_CHECK(op, cudaSetDevice(index));
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0 || !has_primary_context(previous_)) return;
  if (cudaSetDevice(previous_) != cudaSuccess)
    (void)cudaGetLastError();  // a destructor does not throw
}

// Note [Bounded waits]: synchronize_stream / _event (and copies and memsets on the default
// stream) poll cudaStreamQuery / cudaEventQuery instead of calling the blocking
// cudaStreamSynchronize, so that every wait has a deadline (design.md, "No hangs") and never
// burns a core (the first 64 queries yield between them, about the few microseconds a short
// kernel takes; then sleeps grow from 1 us to 1 ms). The deadline is BRAID_DEVICE_TIMEOUT:
// 30 minutes by default, longer than any collective's BRAID_TIMEOUT, so that a stuck
// collective is reported by comm/ naming the peer before the device wait gives up.
std::chrono::milliseconds default_wait_timeout() {
  static const std::chrono::milliseconds timeout = [] {
    const double seconds = get_env_double("BRAID_DEVICE_TIMEOUT", 1800.0);
    BRAID_CHECK(seconds > 0, kInvalidArgument, "BRAID_DEVICE_TIMEOUT=", seconds,
                ": expected a positive number of seconds");
    return std::chrono::milliseconds(static_cast<int64_t>(std::max(1.0, seconds * 1000.0)));
  }();
  return timeout;
}

void throw_wait_timeout(const char* op, const std::string& what,
                        std::chrono::milliseconds timeout) {
  BRAID_FAIL(kTimeout, op, ": ", what, " did not finish within ", timeout.count() / 1000.0,
             " s (BRAID_DEVICE_TIMEOUT, or the call's timeout); the GPU may be hung or waiting "
             "for work that never comes (a collective a peer did not join)");
}

void pause_before_next_query(int round, std::chrono::steady_clock::time_point deadline) {
  constexpr int kSpinRounds = 64;
  if (round < kSpinRounds) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(round - kSpinRounds, 10);  // 1 us << 10 ~ 1 ms
  auto pause = std::chrono::microseconds(int64_t{1} << doublings);
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left < pause) pause = std::chrono::duration_cast<std::chrono::microseconds>(left);
  if (pause.count() > 0) std::this_thread::sleep_for(pause);
}

std::string describe_stream(void* handle, int index) {
  std::ostringstream out;
  if (handle == nullptr) {
    out << "the default stream of cuda:" << index;
  } else {
    out << "stream " << handle << " on cuda:" << index;
  }
  return out.str();
}

}  // namespace cuda_detail

namespace {

using cuda_detail::describe_stream;
using cuda_detail::DeviceGuard;
using cuda_detail::wait_until_ready;

std::string describe_event(const Event& e) {
  std::ostringstream out;
  out << "event " << e.handle << " on cuda:" << e.device.index;
  return out.str();
}

class CudaRuntime final : public DeviceRuntime {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }

  // 0 without a driver or GPU, never throwing: cudaGetDeviceCount then returns an error (35,
  // cudaErrorInsufficientDriver, without a driver) and leaves the count unset.
  int device_count() const override {
    int count = count_.load(std::memory_order_relaxed);
    if (count >= 0) return count;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    count_.store(n, std::memory_order_relaxed);
    return n;
  }

  std::string unavailable_reason() const override {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return "cudaGetDeviceCount returned " + cuda_detail::cuda_error_text(err);
    }
    if (n > 0) return {};
    if (auto visible = get_env_string("CUDA_VISIBLE_DEVICES")) {
      return "cudaGetDeviceCount found no device with CUDA_VISIBLE_DEVICES=\"" + *visible + "\"";
    }
    return "cudaGetDeviceCount found no device";
  }

  DeviceProperties properties(int index) const override {
    check_index(index, "properties");
    cudaDeviceProp prop{};
    BRAID_CUDART_CHECK("properties", cudaGetDeviceProperties(&prop, index));
    DeviceProperties p;
    p.name = prop.name;
    p.total_memory = prop.totalGlobalMem;
    p.compute_major = prop.major;
    p.compute_minor = prop.minor;
    p.multiprocessors = prop.multiProcessorCount;
    return p;
  }

  void* raw_allocate(int index, size_t bytes) override {
    check_index(index, "raw_allocate");
    if (bytes == 0) return nullptr;
    DeviceGuard guard(index, "raw_allocate");
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; as c10's allocator, clear it before going on
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
      BRAID_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes on device cuda:", index,
                 ": cudaMalloc failed with ", cuda_detail::cuda_error_text(err),
                 "; the device has ", free_bytes, " bytes free of ", total_bytes);
    }
    cuda_detail::check_cuda(err, "raw_allocate", "cudaMalloc");
    return ptr;
  }

  // Never throws (allocators call it from DataPtr deleters): a failure, which only a broken
  // context gives, is logged and the memory is left to the driver.
  void raw_free(int index, void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    try {
      DeviceGuard guard(index, "raw_free");
      BRAID_CUDART_CHECK("raw_free", cudaFree(ptr));
    } catch (const Error& e) {
      BRAID_LOG(kWarning) << "cuda:" << index << ": freeing " << bytes << " bytes at " << ptr
                          << " failed: " << e.message();
    }
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream stream) override {
    check_side(dst_device, "destination", bytes);
    check_side(src_device, "source", bytes);
    const bool dst_gpu = dst_device.type == DeviceType::kCUDA;
    const bool src_gpu = src_device.type == DeviceType::kCUDA;
    BRAID_CHECK(dst_gpu || src_gpu, kNotSupported,
                "the cuda runtime copies only to or from cuda "
                "memory; ",
                src_device, " -> ", dst_device, " is the cpu runtime's (copy_bytes)");
    if (bytes == 0) return;
    BRAID_CHECK(dst != nullptr && src != nullptr, kInvalidArgument, "copy of ", bytes, " bytes ",
                src_device, " -> ", dst_device, ": ", dst ? "source" : "destination",
                " pointer is null; expected valid memory");
    const int gpu = dst_gpu ? dst_device.index : src_device.index;
    if (stream.handle != nullptr) {
      BRAID_CHECK(stream.device == dst_device || stream.device == src_device, kInvalidArgument,
                  "copy of ", bytes, " bytes ", src_device, " -> ", dst_device,
                  ": the stream is on ", stream.device,
                  "; expected a stream of one of the copy's cuda devices");
    }
    const int index = stream.handle != nullptr ? stream.device.index : gpu;
    DeviceGuard guard(index, "copy");
    const auto s = static_cast<cudaStream_t>(stream.handle);
    cudaError_t err;
    if (dst_gpu && src_gpu && dst_device.index != src_device.index) {
      // Through NVLink / PCIe peer access when enabled (enable_peer_access), else staged by
      // the driver: cudaMemcpyPeerAsync works either way.
      err = cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, s);
    } else {
      const cudaMemcpyKind kind = dst_gpu && src_gpu ? cudaMemcpyDeviceToDevice
                                  : dst_gpu          ? cudaMemcpyHostToDevice
                                                     : cudaMemcpyDeviceToHost;
      err = cudaMemcpyAsync(dst, src, bytes, kind, s);
    }
    if (err != cudaSuccess) {
      std::ostringstream what;
      what << "copy of " << bytes << " bytes " << src_device << " -> " << dst_device;
      cuda_detail::throw_cuda_error(err, what.str().c_str(),
                                    dst_gpu && src_gpu && dst_device.index != src_device.index
                                        ? "cudaMemcpyPeerAsync"
                                        : "cudaMemcpyAsync",
                                    std::source_location::current());
    }
    if (stream.handle == nullptr) wait_default_stream(index, "copy");
  }

  void memset(void* dst, int index, int value, size_t bytes, Stream stream) override {
    check_index(index, "memset");
    if (bytes == 0) return;
    BRAID_CHECK(dst != nullptr, kInvalidArgument, "memset of ", bytes, " bytes on cuda:", index,
                ": destination pointer is null; expected valid memory");
    check_stream_device(stream, index, "memset");
    DeviceGuard guard(index, "memset");
    BRAID_CUDART_CHECK(
        "memset", cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream.handle)));
    if (stream.handle == nullptr) wait_default_stream(index, "memset");
  }

  Stream create_stream(int index) override {
    check_index(index, "create_stream");
    DeviceGuard guard(index, "create_stream");
    cudaStream_t s = nullptr;
    // Non-blocking: work on it never waits for the legacy default stream (c10's choice too).
    BRAID_CUDART_CHECK("create_stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Stream{Device(DeviceType::kCUDA, index), s};
  }

  void destroy_stream(Stream stream) override {
    if (stream.handle == nullptr) return;  // the default stream is not ours to destroy
    check_cuda_device(stream.device, "destroy_stream");
    DeviceGuard guard(stream.device.index, "destroy_stream");
    // Returns at once; the driver releases the stream after its queued work completes.
    BRAID_CUDART_CHECK("destroy_stream",
                       cudaStreamDestroy(static_cast<cudaStream_t>(stream.handle)));
  }

  void synchronize_stream(Stream stream) override {
    synchronize_stream_for(stream, cuda_detail::default_wait_timeout());
  }

  void synchronize_stream_for(Stream stream, std::chrono::milliseconds timeout) override {
    check_cuda_device(stream.device, "synchronize_stream");
    DeviceGuard guard(stream.device.index, "synchronize_stream");
    const auto s = static_cast<cudaStream_t>(stream.handle);
    wait_until_ready([s] { return cudaStreamQuery(s); }, "synchronize_stream",
                     describe_stream(stream.handle, stream.device.index), timeout);
  }

  // cudaDeviceSynchronize has no deadline and the runtime offers no way to poll a whole
  // device, so it runs on a helper thread while this one waits for it with the deadline. On a
  // timeout the helper stays blocked in the driver and ends when (if) the device does.
  void synchronize_device(int index) override {
    check_index(index, "synchronize_device");
    struct State {
      std::mutex mu;
      std::condition_variable done_cv;
      bool done = false;
      cudaError_t err = cudaSuccess;
    };
    auto state = std::make_shared<State>();
    std::thread([state, index] {
      cudaError_t err = cudaSetDevice(index);
      if (err == cudaSuccess) err = cudaDeviceSynchronize();
      if (err != cudaSuccess) (void)cudaGetLastError();
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->done = true;
        state->err = err;
      }
      state->done_cv.notify_all();
    }).detach();
    const std::chrono::milliseconds timeout = cuda_detail::default_wait_timeout();
    std::unique_lock<std::mutex> lock(state->mu);
    if (!state->done_cv.wait_for(lock, timeout, [&] { return state->done; })) {
      cuda_detail::throw_wait_timeout("synchronize_device", "cuda:" + std::to_string(index),
                                      timeout);
    }
    cuda_detail::check_cuda(state->err, "synchronize_device", "cudaDeviceSynchronize");
  }

  Event create_event(int index) override {
    check_index(index, "create_event");
    DeviceGuard guard(index, "create_event");
    cudaEvent_t e = nullptr;
    // Without timing: recording and waiting are cheaper, and braid times on the host.
    BRAID_CUDART_CHECK("create_event", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return Event{Device(DeviceType::kCUDA, index), e};
  }

  void destroy_event(Event event) override {
    if (event.handle == nullptr) return;
    check_cuda_device(event.device, "destroy_event");
    DeviceGuard guard(event.device.index, "destroy_event");
    BRAID_CUDART_CHECK("destroy_event", cudaEventDestroy(static_cast<cudaEvent_t>(event.handle)));
  }

  void record_event(Event event, Stream stream) override {
    check_event(event, "record_event");
    check_stream_device(stream, event.device.index, "record_event");
    DeviceGuard guard(event.device.index, "record_event");
    BRAID_CUDART_CHECK("record_event", cudaEventRecord(static_cast<cudaEvent_t>(event.handle),
                                                       static_cast<cudaStream_t>(stream.handle)));
  }

  // The event may belong to another device: a stream can wait for work anywhere.
  void stream_wait_event(Stream stream, Event event) override {
    check_event(event, "stream_wait_event");
    const int index =
        stream.device.type == DeviceType::kCUDA ? stream.device.index : event.device.index;
    if (stream.handle != nullptr) check_cuda_device(stream.device, "stream_wait_event");
    DeviceGuard guard(index, "stream_wait_event");
    BRAID_CUDART_CHECK("stream_wait_event",
                       cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle),
                                           static_cast<cudaEvent_t>(event.handle), 0));
  }

  void synchronize_event(Event event) override {
    synchronize_event_for(event, cuda_detail::default_wait_timeout());
  }

  void synchronize_event_for(Event event, std::chrono::milliseconds timeout) override {
    check_event(event, "synchronize_event");
    DeviceGuard guard(event.device.index, "synchronize_event");
    const auto e = static_cast<cudaEvent_t>(event.handle);
    wait_until_ready([e] { return cudaEventQuery(e); }, "synchronize_event", describe_event(event),
                     timeout);
  }

  int current_device() const override {
    int index = 0;
    BRAID_CUDART_CHECK("current_device", cudaGetDevice(&index));
    return index;
  }

  void set_current_device(int index) override {
    check_index(index, "set_current_device");
    BRAID_CUDART_CHECK("set_current_device", cudaSetDevice(index));
  }

  bool enable_peer_access(int index, int peer) override {
    check_index(index, "enable_peer_access");
    check_index(peer, "enable_peer_access");
    if (index == peer) return true;
    int can = 0;
    BRAID_CUDART_CHECK("enable_peer_access", cudaDeviceCanAccessPeer(&can, index, peer));
    if (!can) return false;
    DeviceGuard guard(index, "enable_peer_access");
    const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // enabled before: what the caller asked for
      return true;
    }
    cuda_detail::check_cuda(err, "enable_peer_access", "cudaDeviceEnablePeerAccess");
    return true;
  }

  std::unique_ptr<Allocator> create_allocator(int index) override {
    check_index(index, "create_allocator");
    return cuda_detail::make_device_allocator(*this, index);
  }

  Allocator* pinned_host_allocator() override {
    static Allocator* pinned = cuda_detail::make_pinned_host_allocator().release();
    return pinned;
  }

 private:
  mutable std::atomic<int> count_{-1};  // fixed for a process (CUDA_VISIBLE_DEVICES)

  void check_index(int index, const char* op) const {
    const int count = device_count();
    BRAID_CHECK(index >= 0 && index < count, kOutOfRange, op, ": device cuda:", index,
                " does not exist; ", count, " cuda device(s) are visible");
  }

  void check_cuda_device(Device d, const char* op) const {
    BRAID_CHECK(d.type == DeviceType::kCUDA, kInvalidArgument, op, ": ", d,
                " is not a cuda device; expected a stream or event the cuda runtime created");
    check_index(d.index, op);
  }

  // The copy's side `d` must be cpu memory or a cuda device that exists.
  void check_side(Device d, const char* role, size_t bytes) const {
    BRAID_CHECK(!d.is_meta(), kNotSupported, "meta tensors have no data: cannot copy ", bytes,
                " bytes with meta as the ", role);
    BRAID_CHECK(d.is_cpu() || d.type == DeviceType::kCUDA, kNotSupported,
                "the cuda runtime cannot copy to or from ", d, " (", role, ")");
    if (d.type == DeviceType::kCUDA) check_index(d.index, "copy");
  }

  // A stream given for work on cuda:index: the null handle (that device's default stream,
  // whatever device it names) or a stream of that device.
  void check_stream_device(const Stream& stream, int index, const char* op) const {
    if (stream.handle == nullptr) return;
    BRAID_CHECK(stream.device == Device(DeviceType::kCUDA, index), kInvalidArgument, op,
                ": the stream is on ", stream.device, "; expected a stream of cuda:", index);
  }

  void check_event(const Event& event, const char* op) const {
    check_cuda_device(event.device, op);
    BRAID_CHECK(event.handle != nullptr, kInvalidArgument, op,
                ": the event's handle is null; expected an event from create_event");
  }

  void wait_default_stream(int index, const char* op) {
    wait_until_ready([] { return cudaStreamQuery(nullptr); }, op, describe_stream(nullptr, index),
                     cuda_detail::default_wait_timeout());
  }
};

}  // namespace

namespace detail {
std::unique_ptr<DeviceRuntime> make_cuda_runtime() {
  return std::make_unique<CudaRuntime>();
}
}  // namespace detail

}  // namespace braid

// The core_cuda component's entry point (runtime_registry.cc references it weakly).
extern "C" braid::DeviceRuntime* braid_core_make_cuda_runtime() {
  return braid::detail::make_cuda_runtime().release();
}
