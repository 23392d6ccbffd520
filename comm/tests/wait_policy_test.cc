// Tests of the waits' shared policy (comm/src/wait_policy.h): the spin window of a
// point-to-point wait on synthetic clock values, and the CPU count it is gated on.
#include <gtest/gtest.h>
#include <sched.h>

#include "../src/wait_policy.h"

namespace braid {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = SpinWindow::Clock;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

TEST(SpinWindow, WithoutEventsTheShortSpinEndsTheSpinning) {
  SpinWindow w(t0, microseconds(50), milliseconds(5), true);
  EXPECT_FALSE(w.should_block(t0));
  w.progressed(t0 + microseconds(10), 0);
  EXPECT_FALSE(w.should_block(t0 + microseconds(49)));
  w.progressed(t0 + microseconds(50), 0);
  EXPECT_TRUE(w.should_block(t0 + microseconds(50)));
}

TEST(SpinWindow, EventsExtendTheSpinToTheActiveWindowAfterTheLastOne) {
  SpinWindow w(t0, microseconds(50), milliseconds(5), true);
  w.progressed(t0 + microseconds(40), 3);
  EXPECT_FALSE(w.should_block(t0 + microseconds(40) + microseconds(4999)));
  EXPECT_TRUE(w.should_block(t0 + microseconds(40) + milliseconds(5)));
  // A later event moves the end again; a quiet round never shortens it.
  w.progressed(t0 + milliseconds(3), 1);
  w.progressed(t0 + milliseconds(4), 0);
  EXPECT_FALSE(w.should_block(t0 + milliseconds(7)));
  EXPECT_TRUE(w.should_block(t0 + milliseconds(8)));
}

TEST(SpinWindow, EventsDoNotExtendWithoutASpareCpu) {
  SpinWindow w(t0, microseconds(50), milliseconds(5), false);
  w.progressed(t0 + microseconds(10), 7);
  EXPECT_FALSE(w.should_block(t0 + microseconds(49)));
  EXPECT_TRUE(w.should_block(t0 + microseconds(50)));
}

TEST(SpinWindow, AnActiveWindowShorterThanTheSpinKeepsTheSpin) {
  SpinWindow w(t0, milliseconds(1), microseconds(10), true);
  w.progressed(t0, 1);
  EXPECT_FALSE(w.should_block(t0 + microseconds(999)));
  EXPECT_TRUE(w.should_block(t0 + milliseconds(1)));
}

TEST(UsableCpus, MatchesTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(usable_cpus(), CPU_COUNT(&set));
  EXPECT_GE(usable_cpus(), 1);
}

}  // namespace
}  // namespace braid
