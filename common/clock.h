// Time, injected. Logic that waits, times out or stamps times (the
// coordinator's worker-loss and wait deadlines, the worker's retries and
// heartbeats, pshardctl's waits) takes a `const Clock&` or `const Clock*`
// instead of calling absl::Now()/absl::SleepFor(), so tests drive time with
// FakeClock (common/fake_clock.h) and never sleep to synchronise.
//
// Three operations cover every use: Now(); SleepUntil()/SleepFor(); and
// AwaitWithDeadline(), absl::Mutex::AwaitWithDeadline measured on this clock
// (a condition wait that also ends when the clock reaches the deadline).
#ifndef PSHARD_COMMON_CLOCK_H_
#define PSHARD_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pshard {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Returns once Now() >= deadline (at once for a past deadline).
  virtual void SleepUntil(absl::Time deadline) const = 0;
  void SleepFor(absl::Duration d) const { SleepUntil(Now() + d); }

  // With `mu` held: waits until `cond` holds or Now() reaches `deadline`,
  // whichever is first, and returns whether `cond` holds. `mu` is released
  // while waiting, as in absl::Mutex::Await.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                 absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& cond,
                        absl::Duration timeout) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, cond, Now() + timeout);
  }

  // The wall clock. Stateless, so one shared instance is no hidden state (as
  // LevelDB's Env::Default()); binaries pass it down from main().
  static const Clock& Real();
};

// Wall-clock time: absl::Now(), absl::SleepFor(), Mutex::AwaitWithDeadline.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepUntil(absl::Time deadline) const override {
    absl::SleepFor(deadline - absl::Now());
  }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu.AwaitWithDeadline(cond, deadline);
  }
};

inline const Clock& Clock::Real() {
  static const RealClock* const clock = new RealClock;
  return *clock;
}

}  // namespace pshard

#endif  // PSHARD_COMMON_CLOCK_H_
