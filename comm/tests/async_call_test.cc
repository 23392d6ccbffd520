// Async calls on backends that finish their calls inside run() (docs/comm.md, "Async calls";
// Note [Async calls] in process_group.cc): the call returns before its peers have even made
// it, the group's communication thread runs it, blocking calls wait for the async ones before
// them, errors reach the Work, and a group destroyed with calls queued runs them out first.
// Ranks are forked processes; the backends are shm and, where this build has it, ucx.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../src/call_thread.h"
#include "braid/comm/backend.h"
#include "braid/comm/process_group.h"
#include "braid/comm/shared_tensor.h"
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using std::chrono::milliseconds;
using testing::run_processes;

std::vector<std::string> backends() {
  std::vector<std::string> names = {"shm"};
#if BRAID_HAVE_UCX
  names.push_back("ucx");
#endif
  return names;
}

std::shared_ptr<ProcessGroup> group(const std::string& backend, int rank, int size,
                                    std::shared_ptr<Store> store, milliseconds timeout) {
  return testing::make_group(rank, size, std::move(store), backend, timeout);
}

CallOptions async_call() {
  CallOptions o;
  o.async = AsyncOp::kYes;
  return o;
}

// rank r holds r + 1 at every element.
Tensor ones_times(int rank, int64_t count) {
  Tensor t = Tensor::empty({count}, DType::kF32);
  auto* p = static_cast<float*>(t.data_ptr());
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<float>(rank + 1);
  return t;
}

bool all_equal(const Tensor& t, float want) {
  const auto* p = static_cast<const float*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != want) return false;
  }
  return true;
}

class AsyncCalls : public ::testing::TestWithParam<std::string> {};

// Rank 1 makes its call only after rank 0's async call returned and found its Work unfinished:
// a front that ran the call on the caller's thread would never return to say so (rank 1 waits
// for the key that only comes after), and the test would end in the group's timeout.
TEST_P(AsyncCalls, ReturnBeforeThePeersMakeTheirCall) {
  const std::string backend = GetParam();
  auto result = run_processes(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(backend, rank, size, store, milliseconds(20000));
    EXPECT_TRUE(pg->backend().capabilities().runs_on_any_thread);
    Tensor t = ones_times(rank, 70001);
    if (rank == 0) {
      auto work = pg->all_reduce(t, async_call());
      EXPECT_FALSE(work->test()) << "finished before rank 1 made its call";
      store->set("go", std::string("1"));
      EXPECT_TRUE(work->wait());
    } else {
      store->get("go");
      pg->all_reduce(t);
    }
    EXPECT_TRUE(all_equal(t, 3.0f)) << "rank " << rank;
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// Async calls queued back to back and a blocking call after them run in the order made: every
// result is exact although the Works are waited on only at the end, in reverse order.
TEST_P(AsyncCalls, RunInTheOrderMadeBeforeALaterBlockingCall) {
  const std::string backend = GetParam();
  auto result = run_processes(3, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(backend, rank, size, store, milliseconds(20000));
    std::vector<Tensor> sums, roots;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 6; ++k) {
      sums.push_back(ones_times(rank + k, 4099 + k));
      works.push_back(pg->all_reduce(sums.back(), async_call()));
      roots.push_back(ones_times(rank == k % size ? 10 * k : -2, 300));
      works.push_back(pg->broadcast(roots.back(), k % size, async_call()));
    }
    Tensor last = ones_times(rank, 5);
    pg->all_reduce(last);  // blocking: after all twelve
    EXPECT_TRUE(all_equal(last, 6.0f));
    for (auto it = works.rbegin(); it != works.rend(); ++it) EXPECT_TRUE((*it)->wait());
    for (int k = 0; k < 6; ++k) {
      EXPECT_TRUE(all_equal(sums[k], static_cast<float>(6 + 3 * k))) << "all_reduce " << k;
      EXPECT_TRUE(all_equal(roots[k], static_cast<float>(10 * k + 1))) << "broadcast " << k;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// The backend's error (here its timeout: rank 1 makes no call) reaches the async call's Work,
// naming the call; nothing hangs.
TEST_P(AsyncCalls, AnErrorReachesTheWork) {
  const std::string backend = GetParam();
  auto result = run_processes(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(backend, rank, size, store, milliseconds(20000));
    if (rank == 0) {
      Tensor t = ones_times(rank, 1000);
      CallOptions o = async_call();
      o.timeout = milliseconds(300);
      auto work = pg->all_reduce(t, o);
      try {
        work->wait();
        ADD_FAILURE() << "an all_reduce without its peer succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
        EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
      }
      store->set("done", std::string("1"));
    } else {
      store->get("done");
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// An async call holds its tensors until it finished, as torch's Work does: a temporary passed to
// an async send stays valid although the caller dropped it and reused the memory (rank 1
// receives only after that).
TEST_P(AsyncCalls, AnAsyncSendHoldsItsTensor) {
  const std::string backend = GetParam();
  const int64_t count = 300000;
  auto result = run_processes(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group(backend, rank, size, store, milliseconds(20000));
    if (rank == 0) {
      auto work = pg->send(ones_times(5, count), 1, 3, async_call());
      std::vector<Tensor> others;
      for (int k = 0; k < 4; ++k) others.push_back(ones_times(8, count));  // reuse the memory
      store->set("go", std::string("1"));
      EXPECT_TRUE(work->wait());
    } else {
      store->get("go");
      Tensor got = ones_times(-1, count);
      pg->recv(got, 0, 3);
      EXPECT_TRUE(all_equal(got, 6.0f));
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// A group let go with async calls still queued runs them out before its backend goes: the
// results are there, and nothing is freed under a running call.
TEST_P(AsyncCalls, AGroupLetGoRunsItsQueuedCallsFirst) {
  const std::string backend = GetParam();
  auto result = run_processes(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    std::vector<Tensor> sums;
    for (int k = 0; k < 4; ++k) sums.push_back(ones_times(rank + k, 20000));
    {
      auto pg = group(backend, rank, size, store, milliseconds(20000));
      for (Tensor& t : sums) pg->all_reduce(t, async_call());
    }
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(all_equal(sums[k], static_cast<float>(3 + 2 * k))) << "all_reduce " << k;
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// A shared-memory tensor's deleter holds its group, so when the caller lets go of both during an
// async call, the call thread drops the group's last reference as it releases the tensor it
// held: the group is then destroyed on its own communication thread, which must not try to
// join itself (it detaches instead; call_thread.h).
TEST(AsyncCallsShm, AGroupWhoseLastReferenceGoesOnItsOwnThreadEndsCleanly) {
  auto result = run_processes(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto pg = group("shm", rank, size, store, milliseconds(20000));
    ASSERT_TRUE(pg->backend().capabilities().can_allocate_shared);
    Tensor t = empty_shared(pg, {50000}, DType::kF32);
    auto* p = static_cast<float*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rank + 1);
    if (rank == 0) {
      auto work = pg->all_reduce(t, async_call());
      std::weak_ptr<ProcessGroup> watch = pg;
      t = Tensor();
      pg.reset();  // the held tensor's deleter now holds the last reference
      store->set("go", std::string("1"));
      EXPECT_TRUE(work->wait());
      // The group goes on the call thread once the call finished; this rank stays until then
      // (a crash there must end this rank, not go unseen after it reported).
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!watch.expired() && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      EXPECT_TRUE(watch.expired()) << "the group still exists 10 s after its last call";
    } else {
      store->get("go");
      pg->all_reduce(t);
      EXPECT_TRUE(all_equal(t, 3.0f));
    }
  });
  EXPECT_TRUE(result.ok()) << result.summary();
}

// The backstop on a blocking call's wait for the queue: past its timeout, kTimeout naming the
// call and how many queued calls were still unfinished; the queue then still runs out.
TEST(CallThread, DrainPastItsTimeoutIsATimeoutNamingTheCall) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, ran_second = false;
  {
    CallThread thread;
    thread.post([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
    });
    thread.post([&] { ran_second = true; });
    EXPECT_EQ(thread.pending(), 2u);
    try {
      thread.drain(milliseconds(50), "all_reduce #3 on group 0");
      ADD_FAILURE() << "drain returned with a task still blocked";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
      EXPECT_NE(std::string(e.what()).find("all_reduce #3 on group 0: 2 of the 2 async calls"),
                std::string::npos)
          << e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
    }
    cv.notify_all();
    thread.drain(milliseconds(10000), "barrier #4 on group 0");
    EXPECT_EQ(thread.pending(), 0u);
  }
  EXPECT_TRUE(ran_second);
}

INSTANTIATE_TEST_SUITE_P(Backends, AsyncCalls, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace braid
