// CallThread (call_thread.h): one thread, a FIFO of tasks, condition-variable waits.
#include "call_thread.h"

#include <utility>

#include "braid/core/error.h"

namespace braid {

CallThread::CallThread() : thread_([this] { loop(); }) {}

CallThread::~CallThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void CallThread::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    ++unfinished_;
  }
  work_cv_.notify_one();
}

size_t CallThread::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return unfinished_;
}

void CallThread::drain(std::chrono::milliseconds timeout, const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t before = unfinished_;
  BRAID_CHECK(idle_cv_.wait_for(lock, timeout, [&] { return unfinished_ == 0; }), kTimeout, what,
              ": ", unfinished_, " of the ", before,
              " async calls queued before it did not finish within ", timeout.count(), " ms");
}

void CallThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Every wait on this thread is bounded: a task ends by its collective's deadline, and the
    // queue is only waited on while there is nothing to do (the destructor wakes it).
    work_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ and nothing left: the destructor runs what is queued
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // release what the task held (buffers, staging) before it counts as done
    lock.lock();
    --unfinished_;
    if (unfinished_ == 0) idle_cv_.notify_all();
  }
}

}  // namespace braid
