// CallThread (call_thread.h): one thread, a FIFO of tasks, condition-variable waits.
#include "call_thread.h"

#include <utility>

#include "braid/core/error.h"

namespace braid {

CallThread::CallThread() : thread_([state = state_] { loop(state); }) {}

CallThread::~CallThread() {
  const bool on_thread = std::this_thread::get_id() == thread_.get_id();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->abandoned = on_thread;
  }
  state_->work_cv.notify_one();
  if (on_thread) {
    thread_.detach();  // loop() holds the state and ends once the running task returns
  } else {
    thread_.join();
  }
}

void CallThread::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->tasks.push_back(std::move(task));
    ++state_->unfinished;
  }
  state_->work_cv.notify_one();
}

size_t CallThread::pending() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->unfinished;
}

void CallThread::drain(std::chrono::milliseconds timeout, const std::string& what) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  const size_t before = s.unfinished;
  BRAID_CHECK(s.idle_cv.wait_for(lock, timeout, [&] { return s.unfinished == 0; }), kTimeout, what,
              ": ", s.unfinished, " of the ", before,
              " async calls queued before it did not finish within ", timeout.count(), " ms");
}

void CallThread::loop(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    // Every wait on this thread is bounded: a task ends by its collective's deadline, and the
    // queue is only waited on while there is nothing to do (the destructor wakes it).
    s.work_cv.wait(lock, [&] { return s.stop || !s.tasks.empty(); });
    if (s.abandoned) {
      std::deque<std::function<void()>> dropped;
      dropped.swap(s.tasks);
      lock.unlock();
      return;  // `dropped` goes here, off the lock
    }
    if (s.tasks.empty()) return;  // stop and nothing left: the destructor runs what is queued
    std::function<void()> task = std::move(s.tasks.front());
    s.tasks.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // release what the task held (buffers, staging) before it counts as done
    lock.lock();
    --s.unfinished;
    if (s.unfinished == 0) s.idle_cv.notify_all();
  }
}

}  // namespace braid
