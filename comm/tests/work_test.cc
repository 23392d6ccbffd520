// Work handles: completed_work, AsyncWork (completion from another thread, deadline) and
// then_work (a step that runs once after the inner Work succeeded).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "braid/comm/work.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

std::exception_ptr make_error(ErrorKind kind, const std::string& message) {
  return std::make_exception_ptr(Error(kind, message));
}

ErrorKind kind_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.kind();
  } catch (...) {
  }
  return ErrorKind::kInternal;  // not a braid::Error: fails the callers' comparisons
}

TEST(CompletedWork, SucceedsOrRethrows) {
  auto ok = completed_work();
  EXPECT_TRUE(ok->test());
  EXPECT_TRUE(ok->wait());
  EXPECT_EQ(ok->error(), nullptr);
  auto failed = completed_work(make_error(ErrorKind::kPeerLost, "rank 3 lost"));
  EXPECT_TRUE(failed->test());
  EXPECT_THROW(failed->wait(), Error);
  EXPECT_EQ(kind_of(failed->error()), ErrorKind::kPeerLost);
}

TEST(AsyncWork, CompletionFromAnotherThreadWakesTheWaiter) {
  auto work = std::make_shared<AsyncWork>("all_reduce #1", milliseconds(60000));
  EXPECT_FALSE(work->test());
  std::thread completer([work] { work->complete(); });
  EXPECT_TRUE(work->wait());
  EXPECT_TRUE(work->test());
  EXPECT_EQ(work->error(), nullptr);
  completer.join();
}

TEST(AsyncWork, ManyWaitersAllSeeTheError) {
  auto work = std::make_shared<AsyncWork>("broadcast #4", milliseconds(60000));
  std::atomic<int> saw_error{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      try {
        work->wait();
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kPeerLost) ++saw_error;
      }
    });
  }
  work->complete(make_error(ErrorKind::kPeerLost, "broadcast #4: rank 2 lost"));
  for (auto& t : waiters) t.join();
  EXPECT_EQ(saw_error.load(), 4);
}

TEST(AsyncWork, ShortWaitReturnsFalseBeforeTheDeadline) {
  AsyncWork work("gather #2", milliseconds(60000));
  EXPECT_FALSE(work.wait(milliseconds(1)));
  EXPECT_EQ(work.error(), nullptr);
  work.complete();
  EXPECT_TRUE(work.wait(milliseconds(1)));
}

TEST(AsyncWork, DeadlineRecordsAndThrowsATimeoutNamingTheCall) {
  AsyncWork work("all_gather #9 on group 0", milliseconds(5));
  try {
    work.wait();
    ADD_FAILURE() << "expected kTimeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_NE(e.message().find("all_gather #9 on group 0"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("5 ms"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(work.test());
  work.complete();  // too late: ignored
  EXPECT_EQ(kind_of(work.error()), ErrorKind::kTimeout);
}

TEST(AsyncWork, FirstCompletionWins) {
  AsyncWork work("barrier #1", milliseconds(60000));
  work.complete(make_error(ErrorKind::kIo, "socket closed"));
  work.complete();
  EXPECT_EQ(kind_of(work.error()), ErrorKind::kIo);
}

TEST(AsyncWork, RejectsANonPositiveTimeout) {
  EXPECT_THROW(AsyncWork("x", milliseconds(0)), Error);
}

TEST(ThenWork, RunsTheStepOnceAfterSuccess) {
  auto inner = std::make_shared<AsyncWork>("all_gather #1", milliseconds(60000));
  std::atomic<int> runs{0};
  auto work = then_work(inner, [&] { ++runs; });
  EXPECT_FALSE(work->test());
  EXPECT_EQ(runs.load(), 0);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) waiters.emplace_back([&] { EXPECT_TRUE(work->wait()); });
  inner->complete();
  for (auto& t : waiters) t.join();
  EXPECT_TRUE(work->test());
  EXPECT_EQ(runs.load(), 1);
}

TEST(ThenWork, SkipsTheStepWhenTheInnerWorkFailed) {
  bool ran = false;
  auto work =
      then_work(completed_work(make_error(ErrorKind::kTimeout, "late")), [&] { ran = true; });
  EXPECT_TRUE(work->test());
  EXPECT_THROW(work->wait(), Error);
  EXPECT_FALSE(ran);
  EXPECT_EQ(kind_of(work->error()), ErrorKind::kTimeout);
}

TEST(ThenWork, AFailingStepBecomesTheError) {
  auto work = then_work(completed_work(), [] { BRAID_FAIL(kInvalidArgument, "copy-out failed"); });
  EXPECT_THROW(work->wait(), Error);
  EXPECT_EQ(kind_of(work->error()), ErrorKind::kInvalidArgument);
  EXPECT_THROW(work->wait(), Error);  // stays failed
}

TEST(ThenWork, NullInnerIsRejected) {
  EXPECT_THROW(then_work(nullptr, [] {}), Error);
}

}  // namespace
}  // namespace braid
