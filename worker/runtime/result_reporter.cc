#include "worker/runtime/result_reporter.h"

#include <algorithm>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "common/logging.h"

namespace pshard::worker {
namespace {

// The payload WithFailureCause sets: the enum's number in decimal.
constexpr absl::string_view kFailureCauseUrl =
    "type.googleapis.com/pshard.v1.FailureCause";

}  // namespace

v1::FailureCause FailureCauseOf(const absl::Status& status) {
  if (status.ok()) return v1::FAILURE_CAUSE_UNSPECIFIED;
  if (auto payload = status.GetPayload(kFailureCauseUrl)) {
    int number = 0;
    if (absl::SimpleAtoi(std::string(*payload), &number) &&
        v1::FailureCause_IsValid(number)) {
      return static_cast<v1::FailureCause>(number);
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return v1::FAILURE_CAUSE_PEER;
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
      return v1::FAILURE_CAUSE_WORKER;
    default:
      return v1::FAILURE_CAUSE_JOB;
  }
}

absl::Status WithFailureCause(absl::Status status, v1::FailureCause cause) {
  if (!status.ok()) {
    status.SetPayload(kFailureCauseUrl,
                      absl::Cord(std::to_string(static_cast<int>(cause))));
  }
  return status;
}

bool CoordinatorUnreachable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

absl::Status ReportRankResult(ControlPlane& control, const ResultSource& source,
                              bool ok, absl::string_view error,
                              v1::FailureCause cause, int64_t final_step,
                              const std::string& output_path,
                              absl::Duration rpc_timeout, const Clock& clock,
                              const ResultRetry& retry) {
  v1::ReportResultRequest request;
  request.set_job_id(source.job_id);
  request.set_epoch(source.epoch);
  request.set_rank(source.rank);
  request.set_worker_id(source.worker_id);
  request.set_ok(ok);
  if (!ok) {
    request.set_error(std::string(error));
    request.set_cause(cause);
  }
  request.set_final_step(final_step);
  request.set_output_path(output_path);
  constexpr absl::Duration kSlice = absl::Milliseconds(200);
  const absl::Time give_up = clock.Now() + retry.give_up_after;
  absl::Duration backoff = kSlice;
  bool said_retrying = false;
  for (;;) {
    absl::Status sent = control.ReportResult(request, rpc_timeout);
    if (!CoordinatorUnreachable(sent) || clock.Now() >= give_up) {
      if (!sent.ok()) {
        LOG(ERROR) << "job " << source.job_id << " epoch " << source.epoch
                   << " rank " << source.rank << ": reporting its result ("
                   << (ok ? "ok" : "failed") << ") failed: " << sent;
      } else if (said_retrying) {
        LOG(INFO) << "job " << source.job_id << " epoch " << source.epoch
                  << " rank " << source.rank << ": result reported";
      }
      return sent;
    }
    if (!said_retrying) {  // once, not per retry
      LOG(WARNING) << "job " << source.job_id << " epoch " << source.epoch
                   << " rank " << source.rank
                   << ": the coordinator cannot take its result (" << sent
                   << "); retrying for up to "
                   << absl::FormatDuration(retry.give_up_after);
      said_retrying = true;
    }
    // Sleep in slices, so that a rank torn down stops waiting soon.
    const absl::Time next = std::min(clock.Now() + backoff, give_up);
    while (clock.Now() < next) {
      if (retry.stopped && retry.stopped()) return sent;
      clock.SleepFor(std::min(kSlice, next - clock.Now()));
    }
    backoff = std::min(2 * backoff, absl::Seconds(5));
  }
}

}  // namespace pshard::worker
