#include "common/clock.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace {

// A bound on real waiting that only a broken clock reaches.
constexpr absl::Duration kRealTimeout = absl::Seconds(30);

TEST(RealClockTest, AwaitReturnsTheConditionAtTheDeadline) {
  const Clock& clock = Clock::Real();
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithTimeout(mu, absl::Condition(&flag),
                                      absl::Milliseconds(1)));
  flag = true;
  EXPECT_TRUE(clock.AwaitWithDeadline(mu, absl::Condition(&flag),
                                      absl::InfinitePast()));
}

TEST(FakeClockTest, SleepEndsWhenAdvancedToTheDeadline) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  std::thread sleeper([&] { clock.SleepFor(absl::Seconds(10)); });
  ASSERT_TRUE(clock.WaitForWaiters(1, kRealTimeout));
  clock.Advance(absl::Seconds(9));
  // Still asleep: the deadline is one second away.
  EXPECT_TRUE(clock.WaitForWaiters(1, absl::ZeroDuration()));
  clock.Advance(absl::Seconds(1));
  sleeper.join();
  EXPECT_EQ(clock.Now(), start + absl::Seconds(10));
  EXPECT_FALSE(clock.WaitForWaiters(1, absl::ZeroDuration()));
}

TEST(FakeClockTest, AdvanceOnSleepJumpsToTheDeadline) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  clock.set_advance_on_sleep(true);
  clock.SleepFor(absl::Minutes(5));
  clock.SleepUntil(start);  // in the past: no change
  EXPECT_EQ(clock.Now(), start + absl::Minutes(5));
}

TEST(FakeClockTest, AwaitTimesOutOnlyWhenTheClockPassesTheDeadline) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithTimeout(mu, absl::Condition(&flag),
                                    absl::Seconds(3));
  });
  ASSERT_TRUE(clock.WaitForWaiters(1, kRealTimeout));
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(clock.WaitForWaiters(1, absl::ZeroDuration()));
  clock.Advance(absl::Seconds(1));
  waiter.join();
  EXPECT_FALSE(result);
}

TEST(FakeClockTest, AwaitEndsWhenTheConditionHolds) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(mu, absl::Condition(&flag),
                                     absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.WaitForWaiters(1, kRealTimeout));
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
}

}  // namespace
}  // namespace pshard
