// SPDX-License-Identifier: Apache-2.0
// The current stream: the stream on which work for a device is enqueued when the caller names
// none (kernels, tensor ops, the GPU caching allocator), as c10's getCurrentCUDAStream.
//
// It is per thread and per device (type and index). Until a thread sets one, the current
// stream of every device is its default stream: Stream{device, nullptr}. cpu and meta work is
// immediate, so their current stream stays the null handle unless set.
//
//   Stream s = device_runtime(DeviceType::kCUDA).create_stream(0);
//   {
//     StreamGuard guard(s);            // work for cuda:0 on this thread now goes to s
//     DataPtr p = get_allocator(s.device).allocate(n);  // p's home stream is s
//   }                                   // cuda:0's previous current stream is back
#pragma once

#include "braid/core/device.h"
#include "braid/core/device_runtime.h"

namespace braid {

// The calling thread's current stream for `device`; Stream{device, nullptr} until set.
Stream current_stream(Device device);

// Makes `stream` the calling thread's current stream for stream.device. The stream must stay
// alive while it is current. Throws kInvalidArgument for a negative device index.
void set_current_stream(Stream stream);

// Sets a current stream for a scope and restores the previous one of that device on exit,
// also when an exception leaves the scope.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream) : previous_(current_stream(stream.device)) {
    set_current_stream(stream);
  }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  Stream previous() const { return previous_; }

 private:
  Stream previous_;
};

}  // namespace braid
