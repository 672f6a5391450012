// The rank's last word to the coordinator: ReportResult, retried a few times
// on Unavailable (the job's fate depends on it), each try bounded. Shared by
// every RankJob.
#ifndef PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_
#define PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_

#include <cstdint>
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

// Reports `ok`, or the failure `error` as it is (the coordinator prefixes it
// with "rank R (worker W) failed: ", from the request's own fields), with
// the final step and (on success) the output path. Returns the last try's
// status (callers have nothing better to do with it than log it).
absl::Status ReportRankResult(ControlPlane& control, const ResultSource& source,
                              bool ok, absl::string_view error,
                              int64_t final_step,
                              const std::string& output_path,
                              absl::Duration rpc_timeout, const Clock& clock);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_RESULT_REPORTER_H_
