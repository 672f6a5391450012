// The coordinator's view of time. All timeouts in coordinator/ (worker loss,
// rendezvous and assignment waits, recovery grace) are measured on an injected
// Clock, so tests drive time with FakeClock instead of sleeping.
#ifndef PSHARD_COORDINATOR_CLOCK_H_
#define PSHARD_COORDINATOR_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pshard {
namespace coordinator {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time (absl::Now()).
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_CLOCK_H_
