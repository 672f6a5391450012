// A Clock that only moves when a test says so. Thread-safe.
#ifndef PSHARD_COORDINATOR_FAKE_CLOCK_H_
#define PSHARD_COORDINATOR_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"

namespace pshard {
namespace coordinator {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_FAKE_CLOCK_H_
