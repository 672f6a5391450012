// ProgressReporter: sends rank 0's progress to the coordinator off the
// training thread. At most one ReportProgress is in flight; newer progress
// replaces an unsent one, so a slow coordinator never slows the steps (the
// coordinator keeps only the latest anyway).
//
// The reply decides whether the job goes on: a job the coordinator no
// longer runs (the reply's abort bit; NotFound or FailedPrecondition: it was
// cancelled, failed or replaced by a newer epoch) must stop, and the
// reporter calls `on_stop` once per such reply, on its own thread. A
// transient failure (Unavailable, DeadlineExceeded) is not a reason to stop.
#ifndef PSHARD_WORKER_RUNTIME_PROGRESS_REPORTER_H_
#define PSHARD_WORKER_RUNTIME_PROGRESS_REPORTER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

// Whose progress: the fields every ReportProgressRequest carries.
struct ProgressSource {
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  std::string worker_id;
};

// True when `response` (a ReportProgress reply or its error) tells the rank
// to stop its job.
bool ProgressSaysStop(
    const absl::StatusOr<v1::ReportProgressResponse>& response);

// Puts a step's total gradient norm before clipping (ZeroHook::
// last_grad_norm) into `progress` as grad_norm, when there is one and it is
// finite: the coordinator refuses a non-finite norm, so a NaN or infinite
// norm (torch steps on with it) is left out.
void SetGradNorm(std::optional<double> grad_norm, v1::JobProgress& progress);

class ProgressReporter {
 public:
  // `control` and `clock` must outlive the reporter. Each report is one RPC
  // with deadline `rpc_timeout`.
  ProgressReporter(ControlPlane* control, ProgressSource source,
                   absl::Duration rpc_timeout, std::function<void()> on_stop,
                   const Clock& clock = Clock::Real());
  // Sends what is still unsent (one RPC, bounded by rpc_timeout) and stops
  // the sender thread.
  ~ProgressReporter();

  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Queues `progress` for sending, replacing any unsent progress. Never
  // blocks on the coordinator.
  void Post(const v1::JobProgress& progress);

  // Waits until everything posted so far has been sent (its reply handled),
  // or until `timeout` passes on the clock; true if it was.
  bool Flush(absl::Duration timeout);

 private:
  void Loop();

  ControlPlane* const control_;
  const ProgressSource source_;
  const absl::Duration rpc_timeout_;
  const std::function<void()> on_stop_;
  const Clock& clock_;

  absl::Mutex mu_;
  std::optional<v1::ReportProgressRequest> pending_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once every field is set
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRESS_REPORTER_H_
