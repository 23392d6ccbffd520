// The intra-op thread pool behind parallel_for (thread_pool.h): workers are started lazily up
// to get_num_threads() - 1 and sleep on a condition variable between jobs; one job runs at a
// time (kernels are called from one thread per rank; a second caller waits its turn).
#include "braid/core/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {
namespace {

thread_local bool t_inside_job = false;

class Pool {
 public:
  // Never destroyed: workers may outlive static teardown. A child made by fork() has none of
  // the parent's workers, so it starts over with a fresh pool (the old one is abandoned).
  static Pool& get() {
    static std::once_flag once;
    std::call_once(once, [] {
      instance_ = new Pool(threads_from_env());
      pthread_atfork(nullptr, nullptr, [] { instance_ = new Pool(instance_->threads()); });
    });
    return *instance_;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }
  void set_threads(int n) { threads_.store(n, std::memory_order_relaxed); }

  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    const int want = static_cast<int>(std::min<int64_t>(threads(), n));
    if (want <= 1 || t_inside_job) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::lock_guard<std::mutex> one_job(job_mu_);
    ensure_workers(want - 1);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = want - 1;
      active_ = want - 1;
      error_ = nullptr;
      failed_.store(false, std::memory_order_relaxed);
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return active_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  explicit Pool(int threads) { threads_.store(threads); }

  static int threads_from_env() {
    const int64_t env = get_env_int("BRAID_NUM_THREADS", 1);
    BRAID_CHECK(env >= 1 && env <= 1024, kInvalidArgument,
                "BRAID_NUM_THREADS must be between 1 and 1024, got ", env);
    return static_cast<int>(env);
  }

  static inline Pool* instance_ = nullptr;

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { worker_loop(id); });
      workers_.back().detach();
    }
  }

  // Takes pieces until none is left; records the first exception and stops the others early.
  void work() {
    t_inside_job = true;
    for (;;) {
      if (failed_.load(std::memory_order_relaxed)) break;
      const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_) break;
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    t_inside_job = false;
  }

  void worker_loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen && id < helpers_; });
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::atomic<int> threads_{1};
  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> failed_{false};
  int helpers_ = 0;  // workers 0 .. helpers_-1 take part in the current job
  int active_ = 0;   // of those, how many have not finished it
  uint64_t generation_ = 0;
  std::exception_ptr error_;
};

}  // namespace

void set_num_threads(int threads) {
  BRAID_CHECK(threads >= 1 && threads <= 1024, kInvalidArgument,
              "set_num_threads: expected 1 to 1024 threads, got ", threads);
  Pool::get().set_threads(threads);
}

int get_num_threads() {
  return Pool::get().threads();
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  Pool::get().run(n, fn);
}

}  // namespace braid
