// Work implementations: completed_work (synchronous backends), AsyncWork (completed by another
// thread, with a deadline) and then_work (a step after the inner Work succeeded).
#include "braid/comm/work.h"

#include <utility>

#include "braid/core/error.h"

namespace braid {
namespace {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(std::exception_ptr error) : error_(std::move(error)) {}
  bool test() override { return true; }
  bool wait(std::chrono::milliseconds) override {
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  std::exception_ptr error() const override { return error_; }

 private:
  std::exception_ptr error_;
};

class ThenWork final : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}

  bool test() override {
    if (!inner_->test()) return false;
    if (!inner_->error()) run_then();
    return true;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    if (!inner_->wait(timeout)) return false;  // throws the inner error
    run_then();
    std::lock_guard<std::mutex> lock(mu_);
    if (then_error_) std::rethrow_exception(then_error_);
    return true;
  }

  std::exception_ptr error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return then_error_ ? then_error_ : inner_->error();
  }

 private:
  // Runs the step once; concurrent callers block here until it has run.
  void run_then() {
    std::lock_guard<std::mutex> lock(mu_);
    if (ran_) return;
    ran_ = true;
    try {
      then_();
    } catch (...) {
      then_error_ = std::current_exception();
    }
    then_ = nullptr;  // release what the step captured (staging buffers)
  }

  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
  mutable std::mutex mu_;
  bool ran_ = false;
  std::exception_ptr then_error_;
};

}  // namespace

std::shared_ptr<Work> completed_work(std::exception_ptr error) {
  // A successful CompletedWork has no state to change: every such call shares one, which
  // keeps an allocation off the latency path of every synchronous collective. It lives for the
  // whole program and is handed out without a control block (the aliasing constructor over an
  // empty shared_ptr): copying and dropping it touch no reference count, two atomic operations
  // less on every such call. use_count() reads 0 on it. Never destroyed: a Work may outlive
  // static destruction.
  static auto* const done_work = new CompletedWork(nullptr);
  if (!error) return std::shared_ptr<Work>(std::shared_ptr<Work>(), done_work);
  return std::make_shared<CompletedWork>(std::move(error));
}

AsyncWork::AsyncWork(std::string what, std::chrono::milliseconds timeout)
    : what_(std::move(what)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout) {
  BRAID_CHECK(timeout.count() > 0, kInvalidArgument, "AsyncWork for ", what_,
              ": timeout must be > 0 ms, got ", timeout.count(), " ms");
}

void AsyncWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool AsyncWork::test() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool AsyncWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto until = deadline_;
  if (timeout.count() > 0) until = std::min(until, std::chrono::steady_clock::now() + timeout);
  cv_.wait_until(lock, until, [&] { return done_; });
  if (!done_) {
    if (std::chrono::steady_clock::now() < deadline_) return false;  // the caller's timeout
    done_ = true;
    try {
      BRAID_FAIL(kTimeout, what_, " did not complete within its timeout of ", timeout_.count(),
                 " ms");
    } catch (...) {
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

std::exception_ptr AsyncWork::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::shared_ptr<Work> then_work(std::shared_ptr<Work> inner, std::function<void()> then) {
  BRAID_CHECK(inner != nullptr, kInvalidArgument, "then_work: inner Work is null");
  return std::make_shared<ThenWork>(std::move(inner), std::move(then));
}

}  // namespace braid
