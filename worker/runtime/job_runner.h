// JobRunner: one rank of one job attempt on this worker, from a
// RunJobDirective to ReportResult.
//
//   rendezvous (Gloo addresses through the coordinator's job-scoped KV)
//   -> first step: forward/backward, gradients held; ReportBuckets(observed
//      layout); GetAssignment (refusing another epoch); held buckets run
//      through reduce -> owner's step -> broadcast: step 1 updates
//   -> steps 2..N with communication overlapped with backward; with a
//      checkpoint spec, every every_steps-th step's owned state is written
//      in the background and reported (CheckpointSaver)
//   -> ReportProgress every progress_every steps and on the last (its abort
//      bit stops the job), rank 0 writes <output_dir>/params.safetensors
//      atomically, ReportResult.
//
// The data path is a StepEngine (step_engine.h) from CreateStepEngine: CpuJob
// (ZeroHook + Gloo) on the CPU, or worker/gpu's GpuJob (GpuZeroHook + NCCL)
// on a GPU worker when the job's backend allows (ChooseBackend); the control
// flow above is the same for both. The layout report and the assignment go
// through AssignmentClient, progress through ProgressReporter, the output
// through WriteJobOutput.
//
// Abort() (the coordinator's AbortJob, SIGTERM, drain timeout) cancels the
// rendezvous and aborts the communicator, so Run() returns promptly from any
// phase; a dead peer surfaces as a collective error or timeout. Every wait has
// a deadline (the job's collective_timeout_seconds), so Run() always returns.
#ifndef PSHARD_WORKER_RUNTIME_JOB_RUNNER_H_
#define PSHARD_WORKER_RUNTIME_JOB_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/worker_control.pb.h"
#include "pshard/v1/worker_status.pb.h"
#include "worker/comm/communicator.h"
#include "worker/gpu/backend_choice.h"
#include "worker/runtime/assignment_client.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/coordinator_kv.h"
#include "worker/runtime/progress_reporter.h"
#include "worker/runtime/rank_job.h"
#include "worker/runtime/worker_metrics.h"
#include "worker/runtime/step_engine.h"

namespace pshard::worker {

struct JobRunnerOptions {
  std::string worker_id;
  // Address Gloo listens on and publishes to peers (the worker's --host).
  std::string gloo_hostname = "127.0.0.1";
  // Deadline of control RPCs that do not wait on purpose.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // How long the rank's result is retried while the coordinator cannot be
  // reached (ResultRetry): a job that ends during an outage is still known
  // to have ended once the coordinator is back.
  absl::Duration result_retry_for = absl::Minutes(10);
  // The worker's device: jobs run on NCCL + CUDA when it is a GPU and the
  // job's backend allows (ChooseBackend), on Gloo otherwise.
  WorkerDevice device;
  // Step times, retry pauses and every wait's deadline. Must outlive the
  // runner.
  const Clock* clock = &Clock::Real();
  // The worker's metrics (--metrics_listen), or nullptr. Must outlive the
  // runner.
  WorkerMetrics* metrics = nullptr;
};

class JobRunner : public RankJob {
 public:
  JobRunner(ControlPlane* control, v1::RunJobDirective directive,
            JobRunnerOptions options);
  ~JobRunner() override;

  // RankJob (rank_job.h). Run() returns OK when every step ran.
  absl::Status Run() override;
  void Abort(const absl::Status& reason) override;
  const std::string& job_id() const override { return directive_.job_id(); }
  int64_t epoch() const override { return directive_.epoch(); }
  JobSnapshot Snapshot() const override;

 private:
  absl::Status RunSteps();
  // One step, its snapshot, and its progress on rank 0 (`reporter`).
  absl::Status RunStep(StepEngine& engine, const v1::JobSpec& spec,
                       int64_t step, ProgressReporter* reporter);
  absl::Status CheckAborted();
  // Makes `comm` (nullptr: none) the communicator Abort() aborts; aborts it
  // at once if the job is already aborted.
  void PublishCommunicator(Communicator* comm);
  void ReportResult(const absl::Status& status, const std::string& output);

  ControlPlane* const control_;
  const v1::RunJobDirective directive_;
  const JobRunnerOptions options_;
  CoordinatorKvClient kv_;
  AssignmentClient assignment_;

  mutable absl::Mutex mu_;
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);
  Communicator* comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  JobSnapshot snapshot_ ABSL_GUARDED_BY(mu_);
  std::string output_path_ ABSL_GUARDED_BY(mu_);
  // The epoch's first step: 1, or the step after its resume point. Training
  // thread only.
  int64_t first_step_ = 1;
  // The communicator's bytes_sent at the previous step (metrics).
  int64_t bytes_sent_before_ = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_JOB_RUNNER_H_
