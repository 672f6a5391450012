// What workers report is checked as strictly as what users submit: a
// buggy or hostile worker cannot store a step past the job's end, a
// negative step time or an unknown state in the coordinator's records.
// Pure functions over the request and the job's spec; InvalidArgument
// naming the field, the value and the bound.
#ifndef PSHARD_COORDINATOR_WORKER_REPORTS_H_
#define PSHARD_COORDINATOR_WORKER_REPORTS_H_

#include "absl/status/status.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

// progress.step in [0, steps] (a program job whose spec leaves steps 0 may
// report any step >= 0); loss finite, or NaN ("no loss", as the synthetic
// and replay workloads report); step_time in [0, 1 day]; bytes_sent >= 0;
// samples_per_second finite and >= 0. total_steps is the coordinator's to
// set and is ignored.
absl::Status ValidateProgress(const v1::JobProgress& progress,
                              const v1::JobSpec& spec);

// final_step in [0, steps] as above; cause a known FailureCause.
absl::Status ValidateResult(const v1::ReportResultRequest& result,
                            const v1::JobSpec& spec);

// state IDLE, BUSY or DRAINING (or unset); epoch and step >= 0.
absl::Status ValidateHeartbeat(const v1::HeartbeatRequest& heartbeat);

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_WORKER_REPORTS_H_
