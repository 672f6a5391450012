// Agent: the worker's life in the pool. Registers with the coordinator,
// heartbeats every interval, obeys the directives that ride on heartbeat
// replies, and runs one job at a time on its own thread.
//
//            register               RunJob              job ends
//   (start) ─────────▶ IDLE ───────────────▶ BUSY ─────────────────▶ IDLE
//                        │                    │  AbortJob: abort now,
//                        │ Drain              │  then IDLE
//                        ▼                    ▼ Drain
//                      exit ◀───────────── DRAINING (finish the job first)
//
// A job runs as a RankJob: JobRunner for the built-in workloads, ProgramJob
// (program_job.h) for a program workload, whose program the agent starts,
// supervises and stops; the agent heartbeats all the while.
//
// Drain is a reserved directive: today's coordinator never sends it (its
// DrainWorker only stops giving the worker jobs, and the worker is not told).
// The agent still obeys it as drawn, so that a coordinator may ask a worker
// to finish its job and exit; agent_test covers it, and pshard-worker exits
// once WaitForDrained says so. The worker drains itself the same way
// (Drain()): pshard-worker does on SIGTERM with --shutdown_grace, so that a
// pod being stopped finishes its job first (docs/deploy.md, "Stopping a
// worker").
//
// A heartbeat answered NOT_FOUND (the coordinator forgot us, or restarted
// without our record) makes the agent register again under the same name and
// incarnation. Transient coordinator failures are retried on the next beat;
// a running job is not disturbed by them.
//
// Once registered, the agent holds one WorkerControl.Attach stream open on
// its own thread (fast loss detection: if this process dies, its connection
// closes and the coordinator makes it LOST at once, instead of a heartbeat
// timeout later). A stream that ends (the coordinator restarted) or is
// refused is opened again after a backoff (kAttachBackoffMin doubling to
// kAttachBackoffMax), and at once after each new registration, which also
// ends the stream of the registration before.
#ifndef PSHARD_WORKER_RUNTIME_AGENT_H_
#define PSHARD_WORKER_RUNTIME_AGENT_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/worker_status.pb.h"
#include "worker/gpu/backend_choice.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/rank_job.h"
#include "worker/runtime/worker_metrics.h"
#include "security/transport.h"

namespace pshard::worker {

struct AgentOptions {
  std::string name;
  std::string incarnation;
  // host:port of this worker's WorkerStatus server.
  std::string address;
  std::string host;
  v1::DeviceKind device_kind = v1::CPU;
  std::string device = "cpu";
  // Where Gloo listens (usually the same as host).
  std::string gloo_hostname;
  // The worker's device (--device); decides NCCL or Gloo per job.
  WorkerDevice worker_device;
  absl::Duration rpc_timeout = absl::Seconds(5);
  // JobRunnerOptions::result_retry_for (--result_retry_for).
  absl::Duration result_retry_for = absl::Minutes(10);
  // host:port of the coordinator, as the worker reaches it: a program job's
  // PSHARD_COORDINATOR.
  std::string coordinator_address;
  // How the worker reaches it (TLS files or plaintext), handed to a program
  // job's ranks as PSHARD_TLS_* / PSHARD_INSECURE.
  security::TransportSecurity coordinator_security;
  // Where program jobs' output goes (ProgramLogPath) and each file's cap.
  std::string program_log_dir = "/tmp/pshard-worker/logs";
  int64_t program_log_max_bytes = int64_t{64} << 20;
  // Used until the coordinator states its own in RegisterWorkerResponse.
  absl::Duration default_heartbeat_interval = absl::Seconds(1);
  // Heartbeat pacing, every job's time and every wait's deadline. Must
  // outlive the agent.
  const Clock* clock = &Clock::Real();
  // Built-in jobs' step metrics (JobRunnerOptions::metrics), or nullptr.
  WorkerMetrics* metrics = nullptr;
};

class Agent {
 public:
  Agent(ControlPlane* control, AgentOptions options);
  ~Agent();

  // Starts the heartbeat thread, which registers first (retrying until the
  // coordinator answers or Stop()).
  void Start();

  // Between attempts to open the Attach stream.
  static constexpr absl::Duration kAttachBackoffMin = absl::Milliseconds(100);
  static constexpr absl::Duration kAttachBackoffMax = absl::Seconds(5);

  // Aborts any job with `reason`, stops heartbeating and attaching, and joins
  // every thread.
  void Stop(const absl::Status& reason);

  // Drains on the worker's own initiative (a preStop hook's request,
  // worker/drain_control.h): the agent takes no new job and reports
  // DRAINING in its heartbeats (the next one goes at once, so the
  // coordinator schedules nothing more here and keeps the worker DRAINING
  // until a new process registers). It is drained once its job, if any, has
  // ended, or has committed a checkpoint newer than the latest one when the
  // drain began (HeartbeatResponse.job_checkpoint_step): the job may then
  // lose this rank and restart from it. The job keeps running meanwhile;
  // whoever drained the worker stops it. Idempotent.
  void Drain();

  // Blocks until a Drain directive (reserved, see above) or Drain() has
  // been carried out (the job, if any, finished) or `timeout` passes on the
  // clock; true if drained.
  bool WaitForDrained(absl::Duration timeout);

  v1::GetWorkerStatusResponse Status() const;

 private:
  void HeartbeatLoop();
  // Holds the Attach stream open until Stop (see the header comment).
  void AttachLoop();
  absl::Status Register();
  void Beat();
  // Logs the coordinator becoming unreachable or reachable again: once per
  // change, not per retry.
  void NoteCoordinatorCall(const absl::Status& status);
  void StartJob(const v1::RunJobDirective& directive)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::WorkerState StateLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  ControlPlane* const control_;
  const AgentOptions options_;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  // Drain() was called (not only the directive): a new checkpoint of the
  // running job also ends the drain.
  bool own_drain_ ABSL_GUARDED_BY(mu_) = false;
  // The running job's latest complete checkpoint step, once a heartbeat
  // reply for it has told.
  std::optional<int64_t> job_checkpoint_step_ ABSL_GUARDED_BY(mu_);
  // With own_drain_: that step when the drain began (unset until known).
  std::optional<int64_t> drain_checkpoint_step_ ABSL_GUARDED_BY(mu_);
  // The current (or last, until reaped) job.
  std::unique_ptr<RankJob> job_ ABSL_GUARDED_BY(mu_);
  std::thread job_thread_ ABSL_GUARDED_BY(mu_);
  bool job_running_ ABSL_GUARDED_BY(mu_) = false;
  // A RunJob that arrived while the previous job was still winding down
  // (its result sent, its thread not yet gone); started on the next beat.
  std::optional<v1::RunJobDirective> pending_run_ ABSL_GUARDED_BY(mu_);
  // Set when a job ends, so that the next heartbeat goes at once.
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  // Successful registrations so far; an attachment belongs to one.
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  // The open Attach stream (owned by AttachLoop), for Stop and Register to
  // end; null when none.
  Attachment* attachment_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Whether the last registration or heartbeat reached the coordinator
  // (Unavailable or DeadlineExceeded: not), for NoteCoordinatorCall.
  bool coordinator_reachable_ ABSL_GUARDED_BY(mu_) = true;

  std::thread heartbeat_thread_;
  std::thread attach_thread_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_AGENT_H_
