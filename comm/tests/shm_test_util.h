// Helpers of the shm backend's small-call tests (shm_broadcast_test.cc,
// shm_small_reduce_test.cc): a group's backend with world ranks 10 + r, a call that rethrows
// its error, and what each rank's calls threw.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../src/shm_backend.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "comm_test_util.h"

namespace braid::shm_test {

// A job id no other group of this process uses (segment names start with it).
inline std::string unique_job(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + std::to_string(getpid()) + "n" + std::to_string(counter++);
}

// Rank `rank` of a shm group of `size` whose world ranks are 10, 11, ... (so messages that name
// both kinds of rank tell them apart).
inline std::unique_ptr<Backend> make_backend(int rank, int size, std::shared_ptr<Store> store,
                                             const std::string& job,
                                             std::chrono::milliseconds timeout,
                                             const ShmOptions& options = ShmOptions{}) {
  BackendContext ctx;
  ctx.store = std::move(store);
  ctx.rank = rank;
  ctx.size = size;
  for (int i = 0; i < size; ++i) ctx.global_ranks.push_back(10 + i);
  ctx.job_id = job;
  ctx.timeout = timeout;
  return create_shm_backend(ctx, options);
}

inline void run(Backend& b, const CollectiveDesc& d) {
  auto work = b.run(d);
  if (work->error()) std::rethrow_exception(work->error());
}

// What each rank's calls threw (nullopt: nothing), n ranks as threads.
inline std::vector<std::optional<Error>> errors_of(int n, std::chrono::milliseconds timeout,
                                                   const std::string& job,
                                                   const std::function<void(int, Backend&)>& fn) {
  std::vector<std::optional<Error>> errors(n);
  auto result = testing::run_threads(n, [&](int me, int size, std::shared_ptr<Store> store) {
    auto b = make_backend(me, size, store, job, timeout);
    try {
      fn(me, *b);
    } catch (const Error& e) {
      errors[me] = e;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
  return errors;
}

}  // namespace braid::shm_test
