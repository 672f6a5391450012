// WaitInSlices: a long wait on the coordinator (a rendezvous key, the bucket
// assignment) cut into short RPCs. A worker may wait minutes for what the
// other ranks must do first; asking in slices of a second lets an abort or a
// cancel interrupt the wait within a slice, and lets the wait outlive a
// coordinator that is briefly unreachable or restarting.
//
// One attempt is made per slice. An attempt that ends in DeadlineExceeded
// (the slice ran out) or Unavailable (the coordinator is not answering) is
// retried until the whole timeout has passed; after Unavailable, which comes
// back at once, the wait first pauses so a coordinator that is down is not
// called in a tight loop. Any other error ends the wait.
#ifndef PSHARD_WORKER_RUNTIME_SLICED_WAIT_H_
#define PSHARD_WORKER_RUNTIME_SLICED_WAIT_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace pshard::worker {

struct SlicedWaitOptions {
  // The whole wait.
  absl::Duration timeout = absl::ZeroDuration();
  // The longest single attempt; the last one gets what is left.
  absl::Duration slice = absl::Seconds(1);
  // How long to wait after an Unavailable attempt (never past the deadline).
  absl::Duration unavailable_pause = absl::Milliseconds(200);
  // Measures the timeout and takes the pauses; tests pass a FakeClock. Must
  // outlive the wait.
  const Clock* clock = &Clock::Real();
};

// Calls `attempt(slice)` until it returns OK, and returns OK. Before every
// attempt calls `check_abort()`: a non-OK result ends the wait with that
// status. `attempt` should wait at most `slice` (its RPC deadline may add
// slack). Errors: DeadlineExceeded "<what> within <timeout>" once the
// timeout has passed without success; any other error of `attempt` as it is.
absl::Status WaitInSlices(
    const SlicedWaitOptions& options, absl::string_view what,
    absl::FunctionRef<absl::Status()> check_abort,
    absl::FunctionRef<absl::Status(absl::Duration slice)> attempt);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_SLICED_WAIT_H_
