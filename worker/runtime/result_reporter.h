// The rank's last word to the coordinator: ReportResult, retried with
// backoff while the coordinator cannot be reached (the job's fate depends on
// it: a result that outlives a coordinator outage lets the restarted
// coordinator finish the job instead of re-running it), each try bounded.
// Shared by every RankJob.
#ifndef PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_
#define PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

// Who reports: the rank of a job attempt and the worker that ran it.
struct ResultSource {
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  std::string worker_id;
};

// Whose fault a rank's failure is, which decides whether the coordinator
// restarts the job (JobSpec.max_restarts): the cause its source marked with
// WithFailureCause, else by code — Unavailable and DeadlineExceeded (a peer
// or the coordinator stopped answering: the transports' and waits' codes)
// are PEER, Cancelled and Aborted (the agent or the coordinator stopped the
// rank) are WORKER, anything else (the workload's own errors, a bad spec or
// checkpoint, a full disk) is JOB. OK is UNSPECIFIED.
v1::FailureCause FailureCauseOf(const absl::Status& status);

// `status` marked with `cause`, for the errors whose code says the wrong
// thing (a program's own exit is JOB whatever code carries it).
absl::Status WithFailureCause(absl::Status status, v1::FailureCause cause);

// Whether a report's RPC failed because the coordinator could not be
// reached (Unavailable or DeadlineExceeded: down or restarting), so that
// sending it again later may succeed, rather than because it was refused.
bool CoordinatorUnreachable(const absl::Status& status);

// How long a result is retried: tries on Unavailable or DeadlineExceeded (the
// coordinator is down or restarting) back off from 200 ms to 5 s, until
// `give_up_after` since the first try or until `stopped` (polled at least
// every 200 ms) says the rank is being torn down.
struct ResultRetry {
  absl::Duration give_up_after = absl::Seconds(1);
  std::function<bool()> stopped;
};

// Reports `ok`, or the failure `error` as it is (the coordinator prefixes it
// with "rank R (worker W) failed: ", from the request's own fields) and its
// `cause`, with the final step and (on success) the output path. Returns the
// last try's status (callers have nothing better to do with it than log it).
absl::Status ReportRankResult(ControlPlane& control, const ResultSource& source,
                              bool ok, absl::string_view error,
                              v1::FailureCause cause, int64_t final_step,
                              const std::string& output_path,
                              absl::Duration rpc_timeout, const Clock& clock,
                              const ResultRetry& retry = {});

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_
