// SPDX-License-Identifier: Apache-2.0
// Work handles the front and the backends share (the interface is in types.h):
//   AsyncWork  completed by another thread (a backend's progress thread, a helper); waiters
//              sleep on a condition variable and give up at the collective's deadline.
//   then_work  runs a step once the inner Work succeeded: the list forms of all_gather /
//              gather copy out of their staging buffer this way, so an async call stays async.
// Both are thread-safe: any number of threads may test() / wait() at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "braid/comm/types.h"

namespace braid {

class AsyncWork final : public Work {
 public:
  // `what` names the call for the timeout message, e.g. "all_reduce #5 on group 0 (world
  // ranks [0, 1])". `timeout` (> 0) starts now: wait() never blocks past it.
  AsyncWork(std::string what, std::chrono::milliseconds timeout);

  // Marks the work finished, with `error` when it failed, and wakes every waiter. Only the
  // first call counts: a completion that arrives after the deadline was reported is dropped.
  void complete(std::exception_ptr error = nullptr);

  bool test() override;
  // timeout 0: until finished or the deadline. timeout > 0: returns false when that much time
  // passed first (the deadline still applies). Reaching the deadline records and throws
  // kTimeout naming `what` and the timeout; a failed work rethrows its error.
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;
  std::exception_ptr error() const override;

 private:
  const std::string what_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::steady_clock::time_point deadline_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A Work that finishes when `inner` does and, if `inner` succeeded, after `then` ran (once,
// on whichever thread first sees `inner` finished). An exception from `then` becomes the
// Work's error.
std::shared_ptr<Work> then_work(std::shared_ptr<Work> inner, std::function<void()> then);

}  // namespace braid
