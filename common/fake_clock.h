// A Clock that only moves when a test says so (Advance), or, with
// set_advance_on_sleep(true), jumps to the deadline of every SleepUntil so
// that retry loops run at once. Thread-safe.
//
// Threads blocked in SleepUntil or AwaitWithDeadline wake as soon as
// Advance() reaches their deadline: Advance re-evaluates every pending
// AwaitWithDeadline condition by releasing its mutex (a TryLock/Unlock that
// never blocks: if the mutex is held, its holder's Unlock re-evaluates them).
// WaitForWaiters() lets a test wait until a thread is blocked on the clock
// before it advances, instead of sleeping.
#ifndef PSHARD_COMMON_FAKE_CLOCK_H_
#define PSHARD_COMMON_FAKE_CLOCK_H_

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    {
      absl::MutexLock lock(&mu_);
      now_ += d;
    }
    WakeAwaiters();
  }

  void set_advance_on_sleep(bool on) {
    absl::MutexLock lock(&mu_);
    advance_on_sleep_ = on;
  }

  void SleepUntil(absl::Time deadline) const override {
    absl::MutexLock lock(&mu_);
    if (advance_on_sleep_) {
      if (now_ < deadline) now_ = deadline;
      return;
    }
    ++waiters_;
    const auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return now_ >= deadline;
    };
    mu_.Await(absl::Condition(&reached));
    --waiters_;
  }

  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    {
      absl::MutexLock lock(&registry_mu_);
      awaiting_.insert(&mu);
    }
    {
      absl::MutexLock lock(&mu_);
      ++waiters_;
    }
    const auto done = [&] { return cond.Eval() || Now() >= deadline; };
    mu.Await(absl::Condition(&done));
    {
      absl::MutexLock lock(&mu_);
      --waiters_;
    }
    {
      absl::MutexLock lock(&registry_mu_);
      awaiting_.erase(awaiting_.find(&mu));
    }
    return cond.Eval();
  }

  // Waits (in real time, up to `timeout`) until at least `n` threads are
  // blocked in SleepUntil or AwaitWithDeadline; false on timeout.
  bool WaitForWaiters(int n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    const auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waiters_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  void WakeAwaiters() {
    absl::MutexLock lock(&registry_mu_);
    for (absl::Mutex* m : awaiting_) {
      if (m->TryLock()) m->Unlock();
    }
  }

  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  bool advance_on_sleep_ ABSL_GUARDED_BY(mu_) = false;
  mutable int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  // Mutexes of pending AwaitWithDeadline calls. Taken after a waiter's
  // mutex, never before it: WakeAwaiters only try-locks them.
  mutable absl::Mutex registry_mu_;
  mutable std::multiset<absl::Mutex*> awaiting_ ABSL_GUARDED_BY(registry_mu_);
};

}  // namespace pshard

#endif  // PSHARD_COMMON_FAKE_CLOCK_H_
