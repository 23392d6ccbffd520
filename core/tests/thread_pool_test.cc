// parallel_for: every piece runs once for any thread count, exceptions come back, nested
// calls run inline, and a forked child gets a working pool of its own.
#include "braid/core/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "braid/core/error.h"

namespace braid {
namespace {

class ThreadPool : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_num_threads(); }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_F(ThreadPool, EveryPieceRunsExactlyOnceForEveryThreadCount) {
  for (int threads : {1, 2, 3, 4, 8}) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST_F(ThreadPool, UsesSeveralThreadsWhenAsked) {
  set_num_threads(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Each of the first three pieces waits (briefly, bounded) for the others, so three threads
  // must run at once; with fewer the wait runs out and the count shows it.
  parallel_for(3, [&](int64_t) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    }
    arrived++;
    for (int spin = 0; spin < 2000 && arrived.load() < 3; ++spin) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(ids.size(), 3u);
}

TEST_F(ThreadPool, TheFirstExceptionIsRethrownAndThePoolStaysUsable) {
  set_num_threads(4);
  EXPECT_THROW(parallel_for(100,
                            [&](int64_t i) {
                              if (i == 17) throw std::runtime_error("piece 17");
                            }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  parallel_for(10, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 45);
}

TEST_F(ThreadPool, NestedCallsRunInline) {
  set_num_threads(2);
  std::atomic<int> total{0};
  parallel_for(4, [&](int64_t) { parallel_for(5, [&](int64_t) { total++; }); });
  EXPECT_EQ(total.load(), 20);
}

TEST_F(ThreadPool, RejectsBadThreadCounts) {
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(5000), Error);
}

TEST_F(ThreadPool, AForkedChildHasAWorkingPool) {
  set_num_threads(3);
  parallel_for(8, [](int64_t) {});  // the parent's workers exist now
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> n{0};
    parallel_for(50, [&](int64_t) { n++; });
    ::_exit(n.load() == 50 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace braid
