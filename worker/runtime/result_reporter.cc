#include "worker/runtime/result_reporter.h"

#include <string>

namespace pshard::worker {

absl::Status ReportRankResult(ControlPlane& control, const ResultSource& source,
                              bool ok, absl::string_view error,
                              int64_t final_step,
                              const std::string& output_path,
                              absl::Duration rpc_timeout, const Clock& clock) {
  v1::ReportResultRequest request;
  request.set_job_id(source.job_id);
  request.set_epoch(source.epoch);
  request.set_rank(source.rank);
  request.set_worker_id(source.worker_id);
  request.set_ok(ok);
  if (!ok) {
    request.set_error(std::string(error));
  }
  request.set_final_step(final_step);
  request.set_output_path(output_path);
  absl::Status sent;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) clock.SleepFor(absl::Milliseconds(200));
    sent = control.ReportResult(request, rpc_timeout);
    if (sent.ok() || sent.code() != absl::StatusCode::kUnavailable) break;
  }
  return sent;
}

}  // namespace pshard::worker
