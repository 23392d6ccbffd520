// The communication thread of one ProcessGroup (docs/comm.md, "Async calls"): AsyncOp::kYes
// calls on a backend that finishes its calls inside run() (BackendCapabilities::
// runs_on_any_thread) run here, in submission order, while the caller goes on. Private to
// comm/src/process_group*.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace braid {

class CallThread {
 public:
  CallThread();
  // Runs what is still queued (each task ends by its collective's deadline), then joins.
  ~CallThread();
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  // Queues `task`; tasks run one at a time, in the order posted. A task must not throw.
  void post(std::function<void()> task);
  // Tasks posted and not finished yet.
  size_t pending();
  // Blocks until every task posted so far finished. kTimeout naming `what` when that takes
  // longer than `timeout` (each task is bounded by its own deadline; this backs them up).
  void drain(std::chrono::milliseconds timeout, const std::string& what);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  size_t unfinished_ = 0;  // queued plus the one running
  bool stop_ = false;
  std::thread thread_;  // last: started once every member above exists
};

}  // namespace braid
