// The pshard control plane: worker membership, the job queue with gang
// scheduling, job-scoped rendezvous, bucket-layout checks and shard
// assignment, progress and results, all durable in a StateStore.
//
// A facade over plain units, each with its own header contract and test
// (WorkerRegistry, JobTable, LayoutBarrier, RendezvousStore, EventLog,
// WaitRegistry, recovery, GroupCommit; docs/design.md says who may call
// whom): they hold no lock and are called only under this class's one
// mutex, so an edge that spans them (a lost worker fails its job, which
// fails its waits, which frees workers to schedule) is one atomic section.
//
// This class knows nothing about gRPC. It takes and returns the v1 protobuf
// messages (plain data), and reports errors as absl::Status; server/ converts
// at the edge. Time comes from an injected Clock; timeouts (worker loss,
// waits, recovery grace) fire when Tick() runs, which the server calls every
// few tens of milliseconds and tests call after advancing a FakeClock.
// Thread-safe: one mutex guards all state; every state change is committed to
// the store before the method returns; callbacks of blocking waits run after
// the mutex is released, never under it. The store is written without the
// mutex (group commit): a method seals its writes as a batch, releases the
// mutex, and then the batches sealed so far are written in order, in one
// transaction, by whichever waiting method gets there first. So a slow disk
// delays the methods that changed state, not the heartbeats and status reads
// meanwhile. Each method is one locked section: lock, check and change,
// seal; then, as the section's epilogue after the unlock, wait for the write
// (see GroupCommit) and reply; the lock is never released in the middle of a
// change. A method that changed nothing still waits until every earlier
// batch is written, so no reply depends on state that a crash could lose;
// only the read-only status methods (GetJob, ListJobs, ListWorkers,
// GetShardAssignment, GetEvents) may show a change a few hundred
// microseconds before it is durable.
//
// Commit or nothing (locked_section.h): a method whose change did not
// commit answers Unavailable with the store's error, and memory is put back
// as the store has it; StoreHealth reports it until a write succeeds.
//
// Worker membership (WorkerState):
//
//   RegisterWorker ──▶ IDLE ──(scheduled)──▶ BUSY ──(rank done: its result)──▶ IDLE
//                       │  ╲  ▲               │ (job ended / restarted: rank
//                       │   ╲ │               ▼  taken back, AbortJob sent)
//                       │    ╲└─(it says it  RELEASING: not scheduled; shows
//                       │     ╲  stopped)─── the job it finishes
//                       │      DRAINING       │
//                       ▼                     ▼
//                      LOST: its Attach stream closed (the process died:
//                            its connection broke), no heartbeat for
//                            worker_timeout (e.g. a frozen process or a
//                            lost host), or the name re-registered with a
//                            new incarnation. A LOST worker is never
//                            scheduled; its heartbeats and attaches get
//                            NotFound; it registers again (same name ->
//                            same id "w-<n>").
//   "It says it stopped": a heartbeat without the released (job, epoch),
//   or a ReportResult for it (WorkerRec::releasing). A worker never sent
//   its RunJob is free at once. Only a schedulable worker gets a rank:
//   confirmed, not DRAINING, not RELEASING, and heard from within
//   worker_timeout / 2 (WorkerRegistry::Schedulable); a restart may take
//   back its own RELEASING members (they start the new epoch once they
//   have stopped the old one, and the RunJob repeats meanwhile do not
//   count towards max_unacknowledged_run_jobs).
//
// Job lifecycle (JobState), each edge an event with a reason and a time:
//
//   QUEUED ──(world_size idle workers; job_table.h)──▶ STARTING ──(all ranks
//     │        reported the same layout; assignment published)──▶ RUNNING
//     │                                          │                   │
//     │   (every rank ReportResult ok) ──────────┼───────────────────┴──▶ SUCCEEDED
//     └──── CancelJob, rank error, LOST worker,  ┴── layout mismatch ────▶ FAILED |
//                                                                         CANCELLED
//   Restart edge (JobSpec.max_restarts > 0; restart_policy.h): a failure
//   that is not the job's own (a LOST worker, a rank's ReportResult with cause
//   PEER or WORKER, a program's exit with restart_on_program_failure), while
//   restarts < max_restarts: STARTING|RUNNING ──▶ STARTING in a new epoch on
//   the surviving members plus idle workers, up to world_size and at least
//   min_world_size (the epoch's ranks, layout barrier and RunJob world_size
//   sized to it); with fewer ──▶ QUEUED (before later jobs of its priority),
//   placed at min_world_size idle workers. Job.restarts counts; a Restart event
//   precedes the StateChange, whose reason is "restart R of M after: <cause>".
//   Blame: a PEER failure is held for blame_window (decided by Tick); a loss
//   of another of the job's workers in it is named first ("rank 1 (worker
//   w-2) lost: ...; rank 0 (worker w-1) then failed: ..."), else a valid
//   blamed_rank is.
//   Recovery edge (after a coordinator restart only): STARTING|RUNNING ──▶
//   STARTING with epoch+1, when all the job's workers are back but cannot
//   simply continue (see "Restart" below).
//
// Protocol seen from a worker:
//   RegisterWorker; Attach (one stream held open for the membership's
//   life: fast loss detection, see AttachWorker/WorkerDetached); Heartbeat
//   every heartbeat_interval. A heartbeat reply
//   carries directives in order: pending AbortJob / Drain first, then RunJob.
//   RunJob is repeated on every heartbeat until the worker acknowledges it:
//   by a heartbeat reporting that job and epoch (state BUSY), or by any
//   ReportBuckets/ReportProgress/ReportResult for it. Workers must ignore a
//   RunJob for the (job, epoch) they already run, and an AbortJob for a job
//   they do not run. A worker that heartbeats a job/epoch it is not assigned
//   gets AbortJob for it. A worker that acknowledged its rank and then
//   heartbeats twice in a row without that job (e.g. IDLE) fails the job: it
//   has dropped its rank. Workers must send ReportResult before going IDLE.
//   Then: KvPut/KvGet (rendezvous, scoped by job+epoch), ReportBuckets once,
//   GetAssignment (blocks until published), ReportProgress (rank 0's progress
//   is the job's), ReportResult. A rank that reported its result returns to
//   the pool at once; one taken back by the coordinator when it has said it
//   stopped (see RELEASING above).
//
// Restart (a new Coordinator on the same store):
//   Workers are known but unconfirmed: a heartbeat or registration with the
//   stored incarnation confirms them (no NotFound for that). A worker not back
//   within recovery_grace becomes LOST, failing its job as usual. QUEUED jobs
//   wait as before. A STARTING or RUNNING job waits until every unfinished rank's
//   worker is back; then a RUNNING job whose workers all report that job and
//   epoch simply continues, and any other is restarted on the same workers
//   with a new epoch (rendezvous keys are not stored). Nothing submitted is
//   lost and no job vanishes: it continues, restarts, or fails with a reason.
#ifndef PSHARD_COORDINATOR_COORDINATOR_H_
#define PSHARD_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "shard/layout.h"
#include "coordinator/encoded_layout.h"
#include "coordinator/group_commit.h"
#include "coordinator/job_table.h"
#include "coordinator/notifier.h"
#include "coordinator/paging.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/state_store.h"
#include "coordinator/wait_registry.h"
#include "coordinator/worker_registry.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

struct CoordinatorOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration worker_timeout = absl::Seconds(5);
  // After a restart, how long known workers have to come back.
  absl::Duration recovery_grace = absl::Seconds(10);
  // Upper bound of every blocking wait (KvGet, GetAssignment, WaitForEvents).
  absl::Duration max_wait = absl::Seconds(300);
  // Progress events enter the job's log at most this often (plus the last
  // step); Job.progress itself is always current.
  absl::Duration progress_event_interval = absl::Seconds(1);
  // A RunJob repeated on this many heartbeats without acknowledgement fails
  // the job (the worker cannot or will not start it).
  int max_unacknowledged_run_jobs = 10;
  // A rank's failure with cause PEER waits this long for the loss of the
  // peer it lost, which then takes the blame (see "Blame" above).
  absl::Duration blame_window = absl::Seconds(2);
  // A queue head waiting this long stops later jobs from backfilling onto
  // the idle workers it needs ("Scheduling" in job_table.h).
  absl::Duration head_reservation_after = absl::Minutes(5);

  int max_workers = 65536;
  int max_unfinished_jobs = 10000;
  // Jobs kept, ended ones included (each holds its spec and event log).
  int max_jobs = 100000;
  int max_waiters = 200000;
  int max_kv_key_bytes = 512;
  int64_t max_kv_value_bytes = int64_t{1} << 20;
  int64_t max_kv_keys_per_job = int64_t{1} << 18;
  int64_t max_kv_bytes_per_job = int64_t{256} << 20;
  int64_t max_kv_bytes_total = int64_t{1} << 30;
  int max_kv_keys_per_read = 1 << 16;
  int64_t max_kv_read_bytes = int64_t{256} << 10;
  int max_reason_length = 1024;
  shard::LayoutLimits layout_limits;
  // A state change that completes more waits than this (e.g. an assignment
  // published to 4096 parked ranks) runs their callbacks on the
  // coordinator's notifier thread instead of the caller's, so the RPC that
  // caused it answers at once.
  int max_inline_callbacks = 64;
};

// What the coordinator's metrics show (Coordinator::Stats): counts read
// under its lock at a scrape.
struct CoordinatorStats {
  std::map<v1::JobState, int64_t> jobs_by_state;
  // The oldest QUEUED job's time since submission (zero when none).
  absl::Duration oldest_queued_wait;
  std::map<v1::WorkerState, int64_t> workers_by_state;
  // The longest time since a live (not LOST) worker was last heard from.
  absl::Duration max_heartbeat_age;
};

class Coordinator {
 public:
  // The callback types of the blocking calls (see wait_registry.h).
  using WaitId = coordinator::WaitId;
  using KvCallback = std::function<void(absl::StatusOr<std::string>)>;
  using KvValuesCallback = coordinator::KvValuesCallback;
  using AssignmentPtr = coordinator::AssignmentPtr;
  using AssignmentCallback = coordinator::AssignmentCallback;
  using EventsCallback = coordinator::EventsCallback;
  using ReportCallback = coordinator::ReportCallback;

  // Loads the state in `store` (see "Restart" above).
  // Errors: those of StateStore::Load.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options, const Clock* clock,
      std::unique_ptr<StateStore> store);

  ~Coordinator();

  // ---- Membership ----

  // InvalidArgument: name not 1..253 of [A-Za-z0-9._:-], incarnation not
  //   1..64 characters, address/host/device too long, unknown device kind.
  // ResourceExhausted: max_workers workers are registered.
  // Unavailable: the state store could not commit; nothing changed.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request);

  // NotFound: unknown worker id, LOST worker, or the incarnation was
  //   replaced: register again.
  // Unavailable: the state store could not commit; nothing changed.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);

  // Heartbeat whose RunJob directive (at most one) in `response` lacks its
  // `spec`: `run_job_spec` is that spec, one message shared by every rank of
  // the job's epoch, so a server serializes it once per epoch (and sends it
  // by reference) instead of once per rank. RunJob carries no member list
  // (ranks find each other through the rendezvous store).
  // Errors: as Heartbeat.
  struct SharedHeartbeat {
    v1::HeartbeatResponse response;
    std::shared_ptr<const v1::JobSpec> run_job_spec;
  };
  // `caller_name`: the worker name the caller's credential names (access
  // control): PermissionDenied, as CheckWorkerIsNamed, when the worker is
  // another; checked in the same locked section as the heartbeat itself.
  absl::StatusOr<SharedHeartbeat> HeartbeatShared(
      const v1::HeartbeatRequest& request,
      std::optional<absl::string_view> caller_name = std::nullopt);

  // For callers whose credential names a worker (server/services.cc checks
  // these before a WorkerControl call): OK when worker `worker_id` is one
  // that a credential named `name` may act as: `name` itself or a local
  // rank "name:<i>" (security/worker_principal.h). NotFound: no worker
  // `worker_id` (as the call itself would say). PermissionDenied naming
  // both otherwise.
  absl::Status CheckWorkerIsNamed(absl::string_view worker_id,
                                  absl::string_view name) const;
  // OK when a worker that a credential named `name` may act as (`name`,
  // "name:<i>") holds a rank of job `job_id` (the rendezvous store and
  // assignment of a job are for its ranks only).
  // PermissionDenied otherwise, saying why.
  absl::Status CheckHoldsRank(absl::string_view name,
                              absl::string_view job_id) const;

  // Opens an attachment of a registered worker: the server holds one per
  // open Attach stream, and while it is the worker's current one, its end
  // (WorkerDetached) makes the worker LOST at once. A new attachment
  // replaces the one before; registering again clears it. Returns its id.
  // InvalidArgument: worker_id is not a worker id, incarnation not 1..64
  //   characters.
  // NotFound: unknown worker id, LOST worker, or the incarnation was
  //   replaced: register again.
  absl::StatusOr<int64_t> AttachWorker(const v1::AttachRequest& request);

  // Attachment `attachment_id` of (worker_id, incarnation) ended because the
  // worker went away (its Attach stream's connection closed). If it is still
  // the worker's current attachment, with that incarnation, and the worker
  // is not LOST, the worker is LOST now, as after a heartbeat timeout ("its
  // connection to the coordinator closed"): its job fails or restarts. A
  // stale attachment (replaced, or the worker registered again since)
  // changes nothing.
  // Unavailable: the state store could not commit; nothing changed.
  absl::Status WorkerDetached(absl::string_view worker_id,
                              absl::string_view incarnation,
                              int64_t attachment_id);

  // `worker` is a worker id ("w-7") or a worker name; an id wins.
  // NotFound: no such worker (the message names `worker`).
  absl::StatusOr<v1::WorkerInfo> GetWorker(absl::string_view worker) const;

  // Takes the worker out of scheduling: it finishes its job, if any, and
  // takes no new one until UndrainWorker (or until it restarts with a new
  // incarnation). Its state is DRAINING. Idempotent; durable. The worker is
  // not told to exit (no Drain directive).
  // NotFound: no such worker. FailedPrecondition: the worker is LOST.
  // Unavailable: the state store could not commit; nothing changed.
  absl::StatusOr<v1::WorkerInfo> DrainWorker(absl::string_view worker);

  // Makes the worker schedulable again (a queued job may start on it at
  // once). Idempotent; durable. Errors: as DrainWorker.
  absl::StatusOr<v1::WorkerInfo> UndrainWorker(absl::string_view worker);

  // Page sizes of ListWorkers and ListJobs (AIP-158).
  static constexpr PageLimits kWorkerPages = WorkerRegistry::kPages;
  static constexpr PageLimits kJobPages = JobTable::kPages;

  // Workers in id order, a page at a time.
  // InvalidArgument: negative page_size, or a page_token that is not the
  // next_page_token of an earlier call with the same include_lost.
  using WorkerPage = coordinator::WorkerPage;
  absl::StatusOr<WorkerPage> ListWorkers(bool include_lost, int page_size,
                                         absl::string_view page_token) const;

  // ---- Jobs ----

  // A non-empty `request_id` makes it idempotent: a job already submitted
  // with it and the same spec (defaults applied) is returned as it is now,
  // and no job is added (SubmitJobRequest.request_id).
  // InvalidArgument: the spec or request_id is invalid (names the field).
  // AlreadyExists: request_id was used for a job with another spec.
  // ResourceExhausted: max_unfinished_jobs jobs are queued or running, or
  //   max_jobs jobs are kept.
  // Unavailable: the state store could not commit; nothing changed.
  //
  // `owner` is the principal submitting (Job.owner; empty without access
  // control). A request_id is the owner's own: another owner's retry with it
  // is AlreadyExists, and never sees the first owner's job.
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec,
                                    absl::string_view request_id = {},
                                    absl::string_view owner = {});

  // NotFound: no such job.
  absl::StatusOr<v1::Job> GetJob(absl::string_view job_id) const;

  // Newest first, a page at a time; a page also ends before its jobs would
  // pass `max_bytes` serialized (it always holds at least one job).
  // InvalidArgument: page_size < 0, an unknown state, or a page_token that is
  // not the next_page_token of an earlier call with the same states.
  using JobPage = coordinator::JobPage;
  absl::StatusOr<JobPage> ListJobs(const std::vector<v1::JobState>& states,
                                   int page_size, absl::string_view page_token,
                                   int64_t max_bytes = INT64_MAX) const;

  // NotFound: no such job. FailedPrecondition: already ended.
  // InvalidArgument: reason longer than max_reason_length.
  absl::StatusOr<v1::Job> CancelJob(absl::string_view job_id,
                                    absl::string_view reason);

  // Events with sequence > after_sequence, at most `max`, and whether the
  // job has ended. NotFound: no such job. InvalidArgument: after_sequence < 0.
  struct EventBatch {
    std::vector<v1::JobEvent> events;
    bool terminal = false;
  };
  absl::StatusOr<EventBatch> GetEvents(absl::string_view job_id,
                                       int64_t after_sequence,
                                       int max) const;

  // Calls `done` once: OK when the job has an event after `after_sequence` or
  // has ended; DeadlineExceeded at `deadline` (capped at now + max_wait);
  // NotFound for an unknown job; ResourceExhausted when max_waiters waits
  // are pending. May call `done` before returning (not under the lock).
  WaitId WaitForEvents(absl::string_view job_id, int64_t after_sequence,
                       absl::Time deadline, EventsCallback done);

  // ---- Rendezvous ----

  // InvalidArgument: key not 1..max_kv_key_bytes, value too large.
  // NotFound: no such job. FailedPrecondition: the job is not STARTING or
  //   RUNNING at that epoch. ResourceExhausted: the job's store (or all
  //   jobs' stores together) is full.
  absl::Status KvPut(const v1::KvPutRequest& request);

  // Calls `done` once with the value as soon as the key exists.
  // InvalidArgument: bad key. NotFound: no such job. FailedPrecondition: the
  // job is not active at that epoch. Aborted: the job ended or was restarted
  // while waiting. DeadlineExceeded: `deadline` (capped at now + max_wait)
  // passed. ResourceExhausted: too many waits pending.
  WaitId KvGet(absl::string_view job_id, int64_t epoch, absl::string_view key,
               absl::Time deadline, KvCallback done);

  // KvGet of several keys: calls `done` once with the values of a prefix of
  // `keys` (all of them, or as many as fit max_kv_read_bytes, at least one)
  // as soon as those are all present. Errors as KvGet; InvalidArgument also
  // for no keys or more than max_kv_keys_per_read; DeadlineExceeded names
  // the first key missing.
  WaitId KvGetMany(absl::string_view job_id, int64_t epoch,
                   std::vector<std::string> keys, absl::Time deadline,
                   KvValuesCallback done);

  // ---- Buckets and assignment ----

  // A report with no buckets and a layout_fingerprint is accepted when the
  // fingerprint is that of the epoch's first full report; otherwise the
  // answer is send_layout=true and nothing is recorded (this form never
  // waits; ReportLayout does).
  // InvalidArgument: bad rank or worker, invalid layout, or a layout that
  //   differs from another rank's (both fail the job: "rank R (worker w-N)
  //   ... at bucket B: ..."); a fingerprint that is not 32 bytes (the job
  //   goes on).
  // NotFound: no such job. FailedPrecondition: the job is not STARTING or
  //   RUNNING at that epoch (stale epoch).
  // Unavailable: the state store could not commit; nothing changed.
  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request);

  // A ReportBucketsRequest whose layout is still encoded (EncodedLayout):
  // what the server's codec makes of the request as received.
  struct LayoutReport {
    std::string job_id;
    int64_t epoch = 0;
    int rank = -1;
    std::string worker_id;
    // Empty for a fingerprint-only report.
    EncodedLayout layout;
    // layout_fingerprint as sent (may be empty).
    std::string fingerprint;
  };
  // ReportBuckets answered through `done` (once; maybe before returning,
  // never under the lock). A layout whose encoding equals that of the
  // epoch's first full report is accepted without parsing; any other is
  // decoded, validated and compared field by field. A fingerprint-only
  // report that arrives before any rank sent the layout in full waits for
  // that (until `deadline`, capped at now + max_wait; then
  // send_layout=true), so that ranks reporting together need not all send
  // it.
  // Errors: as ReportBuckets; InvalidArgument also for a layout that does
  // not decode (the job fails); Aborted: the job ended or restarted while
  // waiting.
  WaitId ReportLayout(const LayoutReport& report, absl::Time deadline,
                      ReportCallback done);

  // Calls `done` once with the assignment of (job, epoch) when published, in
  // `view` (UNSPECIFIED is FULL); every caller of a view gets the same
  // shared message.
  // NotFound: no such job. FailedPrecondition: stale or unknown epoch, or the
  // job ended without one. Aborted: the job ended while waiting.
  // InvalidArgument: unknown view.
  // DeadlineExceeded / ResourceExhausted: as KvGet.
  WaitId GetAssignment(absl::string_view job_id, int64_t epoch,
                       v1::AssignmentView view, absl::Time deadline,
                       AssignmentCallback done);

  // The latest published assignment. NotFound: no such job.
  // FailedPrecondition: none published yet.
  absl::StatusOr<v1::ShardAssignment> GetShardAssignment(
      absl::string_view job_id) const;

  // ---- Progress and results ----

  // abort=true when the job has ended or moved to another epoch.
  // NotFound: no such job. InvalidArgument: bad rank/worker, negative step.
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request);

  // ok=false fails the job naming the rank, worker and error; ok=true from
  // every rank makes it SUCCEEDED. Reports for an ended job or another
  // epoch are accepted and ignored (the worker is free either way).
  // NotFound: no such job. InvalidArgument: bad rank/worker.
  // FailedPrecondition: ok=true before the assignment was published.
  // Unavailable: the state store could not commit; nothing changed.
  absl::Status ReportResult(const v1::ReportResultRequest& request);
  // ReportResult that never blocks on the state database: `done` gets the
  // same outcome once the result is durable, from the calling thread when
  // nothing had to be written, else from the notifier thread after a write
  // that groups every change sealed by then. For the server: a burst of
  // 4096 results then holds no RPC thread that heartbeats need, and
  // becomes a few large transactions instead of thousands of small ones.
  void ReportResultAsync(const v1::ReportResultRequest& request,
                         std::function<void(absl::Status)> done);

  // One rank's shard of a checkpoint (docs/checkpoints.md). When the last
  // rank's shard of a step is in, writes the step's manifest (the commit
  // point) and prunes to the spec's keep_last, outside the lock; the job's
  // CheckpointRecord becomes COMPLETE, or FAILED (a rank could not write,
  // or the manifest could not be written: its reason names rank and file),
  // with a JobEvent.checkpoint either way. Training is never stopped by a
  // checkpoint. A report for an ended job or another epoch is ignored (the
  // reply's state is unspecified). NotFound: no such job. InvalidArgument:
  // bad rank/worker or a malformed entry (tracker's checks).
  // FailedPrecondition: the job has no checkpoint spec.
  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& request);

  // ---- Waits and time ----

  // Ends a pending wait without calling its callback. Safe to call for a
  // wait that has already completed.
  void CancelWait(WaitId id);

  // Jobs and workers counted by state, for the metrics endpoint
  // (coordinator_metrics.cc). O(jobs + workers) under the lock.
  CoordinatorStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Fires what is due at clock->Now(): LOST workers (failing their jobs),
  // wait deadlines, throttled progress events, restart recovery.
  void Tick();

  // OK while the state store commits; the error of the latest failed write
  // (or probe) until one succeeds. For the server's health status.
  absl::Status StoreHealth() const;

  // Waits (up to `timeout`) until callbacks handed to the notifier thread
  // have run; for tests.
  bool WaitForNotifier(absl::Duration timeout);

  // Waits (up to `timeout`, on the real clock) until exactly `count` waits
  // are pending (parked KvGet, GetAssignment, WaitForEvents or layout
  // reports); for tests that must act on a parked wait, e.g. cancel it,
  // instead of sleeping.
  bool WaitForPendingWaits(int count, absl::Duration timeout) const;

 private:
  // One locked section and its epilogue (locked_section.h).
  class Locked;
  // Writes gathered by the current locked section.
  struct Pending;

  Coordinator(CoordinatorOptions options, const Clock* clock,
              std::unique_ptr<StateStore> store);
  // Restores the store's state (recovery.h).
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::WorkerInfo> SetDrainRequested(absl::string_view worker,
                                                   bool drain)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Cross-cutting edges (coordinator.cc) ----
  // Each spans units (workers, jobs, waits, the log), so each runs whole
  // under mu_: a lost worker fails its job, which fails its waits, which
  // frees workers for the next job, in one locked section.

  // A job state edge: its event appended, the job persisted.
  void Transition(JobRec& job, v1::JobState to, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendEvent(JobRec& job, v1::JobEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushProgress(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job (no-op if ended): releases its ranks, fails its waits.
  void EndJob(JobRec& job, v1::JobState state, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new epoch on `worker_nums` (by rank): STARTING.
  void StartEpoch(JobRec& job, const std::vector<int64_t>& worker_nums,
                  std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseRank(JobRec& job, int rank, bool send_abort,
                   absl::string_view reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkLost(WorkerRec& w, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failure of the active job, described by `cause`: a restart when
  // `restartable` and restarts are left (restart_policy.h), else FAILED.
  // `excluded_worker` (a number, 0 for none) is left out of the restart
  // (a WORKER failure is that worker's own trouble).
  void FailOrRestart(JobRec& job, std::string cause, bool restartable,
                     int64_t excluded_worker = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The restart's event and its new epoch on `worker_nums`.
  void RestartEpoch(JobRec& job, const std::vector<int64_t>& worker_nums,
                    const std::string& restart_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before a restarted epoch: marks the ended epoch's WRITING checkpoints
  // FAILED, and sets job.resumed_from to the newest of the
  // job's own COMPLETE checkpoints that still verifies (sizes and SHA-256;
  // under the lock, for now), else to job.initialized_from (a job submitted
  // with from_checkpoint), else clears it (from step 0). Returns a note for
  // the epoch's reason: where it resumes, and why newer ones were skipped
  // (empty for a job without a checkpoint spec).
  std::string ChooseResumePoint(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SubmitJob's check of spec.from_checkpoint (defaults applied), without
  // the lock: resolves it (a step directory, or the latest complete
  // checkpoint of a job's directory), verifies every shard's size and
  // SHA-256, and requires the spec's fingerprint and a step < spec.steps.
  // InvalidArgument / FailedPrecondition naming the path and what differs.
  static absl::StatusOr<v1::ResumePoint> ResolveFromCheckpoint(
      const v1::JobSpec& spec);
  // "initialised from PATH (step s)", for reasons and events.
  static std::string InitializedFromNote(const v1::ResumePoint& point);
  // Decides a held PEER failure (job.held_failure) with no loss in its
  // window: the blamed rank, if any, is named first.
  void DecideHeldFailure(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts queued jobs while one may (priority, backfill and the head's
  // reservation: "Scheduling" in job_table.h); refreshes queued reasons.
  void Schedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies DecideRecovery to a recovering job.
  void CheckRecovery(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Acknowledge(JobRec& job, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishAssignment(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job's KV, assignment and layout waits with `status` (and
  // empties its rendezvous store).
  void FailJobWaiters(JobRec& job, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the event waits `ids` woke (those not gone already).
  void WakeEventWaiters(const std::vector<WaitId>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the parked fingerprint reports once the reference layout is set.
  void AnswerLayoutWaiters(JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The answer of a layout report, or nullopt when it was parked as wait
  // `*parked` with callback `*done` (only when both are not null).
  // Sets `*needs_commit` when the answer rests on a change the caller must
  // commit before replying.
  std::optional<absl::StatusOr<v1::ReportBucketsResponse>> ReportBucketsLocked(
      const LayoutReport& report, absl::Time deadline, WaitId* parked,
      ReportCallback* done, bool* needs_commit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReportResult's checks and changes; true when there is a change to
  // commit.
  absl::StatusOr<bool> ReportResultLocked(const v1::ReportResultRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- Waits ----
  absl::Time CapDeadline(absl::Time deadline) const;
  // Parks `wait` until `deadline` (capped by CapDeadline); its id.
  WaitId Park(Wait wait, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a wait whose deadline passed.
  void Expire(Wait& wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- Durability and callbacks (locked_section.h) ----
  void PersistJob(const JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistWorker(const WorkerRec& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long a section's epilogue (Locked::Commit) waits. kAllSealed: until
  // every batch sealed so far is durable, so no reply rests on state that a
  // crash could lose. kOwnBatch skips the wait when this section sealed
  // nothing: for replies that rest on no state of other sections (a
  // heartbeat answered with no directive), so they never queue behind
  // another section's write.
  enum class CommitWait { kAllSealed, kOwnBatch };
  // Seals the pending writes as the next batch of commit_; its ticket, 0 if
  // none.
  uint64_t Seal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A callback run after the section, with the outcome of its commit.
  using Deferred = std::function<void(const absl::Status& commit)>;
  void Defer(Deferred fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers `done` with `result` after the section, or with the commit's
  // error when the change it rests on did not commit (locked_section.h).
  template <typename Done, typename Result>
  void DeferAnswer(Done done, Result result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a finished section's callbacks with its commit's outcome: inline,
  // or on the notifier thread when there are more than max_inline_callbacks.
  void RunDeferred(std::vector<Deferred> fns, const absl::Status& commit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Restores the records a failed write held, once (locked_section.h).
  void RollBackFailedWrite() ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  const RendezvousLimits kv_limits_;
  const Clock* const clock_;
  const std::unique_ptr<StateStore> store_;

  // The one lock: every unit below is a plain class called under it.
  mutable absl::Mutex mu_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  WaitRegistry waits_ ABSL_GUARDED_BY(mu_);
  // Bytes of all jobs' rendezvous stores together.
  int64_t kv_bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Sealed under mu_, written without it (see Locked::Commit).
  GroupCommit commit_;
  std::vector<Deferred> deferred_ ABSL_GUARDED_BY(mu_);
  // Declared last: destroyed first, after running what it was given.
  std::unique_ptr<Notifier> notifier_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_COORDINATOR_H_
