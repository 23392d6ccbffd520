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
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace braid {

class CallThread {
 public:
  CallThread();
  // Runs what is still queued (each task ends by its collective's deadline), then joins. On
  // the thread itself (a task let go of the last reference to the group that owns this, e.g.
  // through a shared-memory tensor's deleter) it cannot join: the thread is detached and drops
  // the tasks still queued, whose Works then end at their own deadlines.
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
  // What the thread uses; shared, so that a detached thread never touches a destroyed object.
  struct State {
    std::mutex mu;
    std::condition_variable work_cv, idle_cv;
    std::deque<std::function<void()>> tasks;
    size_t unfinished = 0;  // queued plus the one running
    bool stop = false;
    bool abandoned = false;  // destroyed from the thread itself: drop the rest and end
  };
  static void loop(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // last: started once state_ exists
};

}  // namespace braid
