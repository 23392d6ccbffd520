// CommQueue (comm_queue.h): one worker thread, a FIFO of operations, condition-variable waits
// with deadlines (design.md: never spin, every wait has a deadline).
#include "comm_queue.h"

#include "braid/core/error.h"

namespace braid::shard {

CommQueue::CommQueue(std::chrono::milliseconds deadline)
    : deadline_(deadline), thread_([this] { loop(); }) {}

CommQueue::~CommQueue() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<CommQueue::Op> CommQueue::submit(std::string what, std::function<void()> fn) {
  auto op = std::make_shared<Op>();
  op->what = std::move(what);
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.emplace_back(op, std::move(fn));
    last_ = op;
  }
  cv_.notify_one();
  return op;
}

void CommQueue::wait(const std::shared_ptr<Op>& op) {
  if (!op) return;
  std::unique_lock<std::mutex> lk(mu_);
  // The deadline grows with the work still ahead of op: each of those has its own deadline.
  const auto ahead = static_cast<int64_t>(queue_.size()) + 1;
  const auto until = std::chrono::steady_clock::now() + deadline_ * ahead;
  if (!done_cv_.wait_until(lk, until, [&] { return op->done; })) {
    BRAID_FAIL(kTimeout, "ShardedModel: ", op->what, " did not finish within ",
               (deadline_ * ahead).count(), " ms on the communication thread");
  }
  if (op->error) std::rethrow_exception(op->error);
}

void CommQueue::drain() {
  std::shared_ptr<Op> last;
  {
    std::lock_guard<std::mutex> lk(mu_);
    last = last_;
  }
  wait(last);
  std::lock_guard<std::mutex> lk(mu_);
  if (failed_) std::rethrow_exception(failed_);
}

void CommQueue::loop() {
  for (;;) {
    std::pair<std::shared_ptr<Op>, std::function<void()>> item;
    std::exception_ptr failed;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      failed = failed_;
    }
    std::exception_ptr error = failed;
    if (!error) {
      try {
        item.second();
      } catch (...) {
        error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      item.first->done = true;
      item.first->error = error;
      if (error && !failed_) failed_ = error;
    }
    done_cv_.notify_all();
  }
}

}  // namespace braid::shard
