#include "worker/runtime/sliced_wait.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pshard::worker {

absl::Status WaitInSlices(
    const SlicedWaitOptions& options, absl::string_view what,
    absl::FunctionRef<absl::Status()> check_abort,
    absl::FunctionRef<absl::Status(absl::Duration slice)> attempt) {
  const absl::Time deadline = options.clock->Now() + options.timeout;
  while (true) {
    absl::Status aborted = check_abort();
    if (!aborted.ok()) return aborted;
    const absl::Duration left = deadline - options.clock->Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " within ", absl::FormatDuration(options.timeout)));
    }
    absl::Status status = attempt(std::min(left, options.slice));
    if (status.ok()) return status;
    if (status.code() == absl::StatusCode::kUnavailable) {
      const absl::Duration pause =
          std::min(options.unavailable_pause, deadline - options.clock->Now());
      if (pause > absl::ZeroDuration()) options.clock->SleepFor(pause);
      continue;
    }
    if (status.code() != absl::StatusCode::kDeadlineExceeded) return status;
  }
}

}  // namespace pshard::worker
