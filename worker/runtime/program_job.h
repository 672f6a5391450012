// ProgramJob: one rank of a program job (JobSpec.program) on this worker, as
// torchrun's agent runs a rank of a PyTorch script. The agent starts it for a
// RunJobDirective whose spec has a program workload:
//
//   every rank's agent publishes its worker id under kProgramAgentKeyPrefix
//   (program_keys.h) for the sessions' error messages;
//   MASTER_ADDR/PORT: rank 0 picks a free port on its host and publishes
//     "host:port" under pshard/program/master_addr in the job's KV (scoped by
//     job and epoch); the other ranks read it (deadline: the job's
//     collective_timeout_seconds)
//   -> start argv (PATH lookup) as a child in its own process group, through
//      ChildProcess's reaper (no orphan, even if the worker is killed -9),
//      with the environment of docs/api.md ("Program jobs"), stdin
//      /dev/null, stdout and stderr into ProgramLog (size-capped, per job and
//      rank)
//   -> wait for it to exit; exit 0 is ok, anything else fails the rank with
//      "program exited with status 3" / "program killed by signal 9
//      (Killed)"; a program that cannot start fails with the reason naming
//      argv[0]
//   -> ReportResult (ok, or the reason prefixed "rank R (worker W): ").
//
// Abort() (the coordinator's AbortJob after another rank failed or a cancel;
// the worker shutting down) sends SIGTERM to the program's process group and
// SIGKILL once grace_period_seconds pass on the clock; Run() then returns the
// abort reason. Run() returns once the program is gone.
#ifndef PSHARD_WORKER_RUNTIME_PROGRAM_JOB_H_
#define PSHARD_WORKER_RUNTIME_PROGRAM_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/worker_control.pb.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/coordinator_kv.h"
#include "worker/runtime/program_keys.h"
#include "worker/runtime/rank_job.h"
#include "security/transport.h"
#include "worker/gpu/backend_choice.h"

namespace pshard::worker {

// Where a rank sits on its host: LOCAL_RANK and LOCAL_WORLD_SIZE.
struct LocalPlacement {
  int local_rank = 0;
  int local_world_size = 1;
};

// The directive's local_rank/local_world_size (the coordinator's placement),
// or 0 of 1 when they are unset (an older coordinator) or inconsistent
// (outside 0 <= local_rank < local_world_size <= world_size).
LocalPlacement LocalPlacementOf(const v1::RunJobDirective& directive);

struct ProgramJobOptions {
  // The id the rank's RPCs carry ("w-N"): PSHARD_WORKER_ID.
  std::string worker_id;
  // host:port of the coordinator: PSHARD_COORDINATOR.
  std::string coordinator_address;
  // PSHARD_TLS_* / PSHARD_INSECURE (security::ClientSecurityEnvironment).
  security::TransportSecurity coordinator_security;
  // The worker's advertised host: PSHARD_HOSTNAME, and MASTER_ADDR on rank 0.
  std::string hostname = "127.0.0.1";
  // The worker's device (--device resolved). PSHARD_DEVICE is its name
  // ("cuda:1") when the job's backend picks NCCL on it (ChooseBackend), and
  // "cpu" when Gloo. On a multi-GPU node the GPU this worker holds, which
  // need not be cuda:LOCAL_RANK (LOCAL_RANK is the rank's place in the
  // job's placement).
  WorkerDevice device;
  // Where ProgramLog files go (program_log.h), and each file's cap.
  std::string log_dir;
  int64_t log_max_bytes = int64_t{64} << 20;
  // Deadline of control RPCs that do not wait on purpose.
  absl::Duration rpc_timeout = absl::Seconds(10);
  // How long the program's result is retried while the coordinator cannot
  // be reached (ResultRetry, as JobRunnerOptions::result_retry_for).
  absl::Duration result_retry_for = absl::Minutes(10);
  // The grace period and every wait's deadline. Must outlive the job.
  const Clock* clock = &Clock::Real();
};

class ProgramJob : public RankJob {
 public:
  ProgramJob(ControlPlane* control, v1::RunJobDirective directive,
             ProgramJobOptions options);
  ~ProgramJob() override;

  // RankJob (rank_job.h). Run() returns OK when the program exited 0.
  absl::Status Run() override;
  void Abort(const absl::Status& reason) override;
  const std::string& job_id() const override { return directive_.job_id(); }
  int64_t epoch() const override { return directive_.epoch(); }
  JobSnapshot Snapshot() const override;

  // The rank's log file (ProgramLogPath under options.log_dir).
  const std::string& log_path() const { return log_path_; }

  // The program's environment beyond the worker's own, as "NAME=value": the
  // spec's env, then the agent's names (which the spec may not set).
  // `master` is "host:port". Errors: the spec's fingerprint's, and
  // ChooseBackend's (NCCL asked of a worker without a GPU).
  static absl::StatusOr<std::vector<std::string>> Environment(
      const v1::JobSpec& spec, const v1::RunJobDirective& directive,
      const ProgramJobOptions& options, const std::string& master);

 private:
  absl::Status RunProgram(const v1::JobSpec& spec);
  absl::StatusOr<std::string> Rendezvous(absl::Duration timeout);
  absl::Status CheckAborted();

  ControlPlane* const control_;
  const v1::RunJobDirective directive_;
  const ProgramJobOptions options_;
  const std::string log_path_;
  CoordinatorKvClient kv_;

  mutable absl::Mutex mu_;
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_PROGRAM_JOB_H_
