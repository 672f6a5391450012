// The coordinator's jobs: one record per job kept (its durable view, event
// log, ranks of the current epoch, layout barrier, rendezvous store and
// published assignment), the queue of jobs waiting for workers (higher
// JobSpec.priority first, FIFO by job number within a priority) and the set
// of active (STARTING or RUNNING) jobs.
//
// The job state machine is drawn in coordinator.h; Transition makes one
// edge on the durable view and returns its event, which the coordinator
// appends to the job's log. Choosing the next queued job and its idle
// workers (PlaceNext, over PlaceRanks) is the scheduling step; starting the
// epoch there is the coordinator's (it changes workers too).
//
// Scheduling (PlaceNext), in queue order:
//   - a job that needs more workers than the pool has (registered, not
//     draining) can never start as the pool is: it is passed over and holds
//     nothing back (its reason says so: QueuedReason);
//   - the first job that fits on the idle workers starts; so a later job
//     that fits starts while the head waits for more (backfill);
//   - but once the head (the first job that could start on the pool but
//     does not fit yet) has been queued for reservation_after (a
//     restarting head: at once), nothing behind it starts until it has:
//     every idle worker is one it needs.
//   Why: without runtime estimates we cannot tell whether a backfilled job
//   ends before the head could have started (EASY backfilling's test), so
//   backfilling is allowed only for a bounded time, after which the workers
//   freed one by one accumulate for the head and it cannot starve behind a
//   stream of small jobs.
//
// Called under the coordinator's lock; not thread-safe itself.
// Errors:
//   ResourceExhausted (Add): max_jobs jobs kept, or max_unfinished_jobs
//     queued or active.
//   NotFound (Get, ActiveAt): "no job <id>".
//   FailedPrecondition (ActiveAt): not STARTING or RUNNING, or another epoch
//     ("epoch E is stale|unknown; current epoch is C").
//   InvalidArgument (CheckRank): rank out of range, or held by another
//     worker; (List) a bad page size, state or page token;
//     (ValidateRequestId) not 0..128 characters of [A-Za-z0-9._:-].
//   AlreadyExists (FindSubmission): the request id was used for a job with
//     another spec.
//
// Idempotent submission: a job submitted with a request id is indexed by
// it (Add, and Restore from the stored Job.request_id, so the index
// survives a coordinator restart); FindSubmission finds it for a retry.
#ifndef PSHARD_COORDINATOR_JOB_TABLE_H_
#define PSHARD_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/checkpoint_tracker.h"
#include "coordinator/event_log.h"
#include "coordinator/layout_barrier.h"
#include "coordinator/paging.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/scheduler.h"
#include "coordinator/wait_registry.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/shard.pb.h"

namespace pshard {
namespace coordinator {

// STARTING or RUNNING: the job holds workers.
inline bool IsActive(v1::JobState s) {
  return s == v1::STARTING || s == v1::RUNNING;
}

struct RankRec {
  int64_t worker_num = 0;
  // Where the rank sits on its host (RunJobDirective.local_rank), from the
  // epoch's members' hosts (SetLocalRanks).
  LocalRank local;
  // Reported a result (ok or not) at this epoch; the worker is released.
  bool finished = false;
};

// A rank's PEER failure held for the blame window (see "Blame" in
// coordinator.h): a loss of another of the job's workers within it takes
// the blame. Not durable: a coordinator restart restarts the epoch anyway.
struct HeldFailure {
  int rank = -1;
  std::string error;
  // The rank the failed one says it lost, or -1.
  int blamed_rank = -1;
  absl::Time decide_at;
};

struct JobRec {
  int64_t num = 0;
  // The durable view: spec, state, reason, times, progress, members, epoch.
  v1::Job job;
  EventLog log;
  // Per rank of the current epoch (empty while QUEUED).
  std::vector<RankRec> ranks;
  // Ranks with finished == true.
  int finished_ranks = 0;
  LayoutBarrier layout;
  // The latest published assignment (any epoch), and its OwnersView.
  AssignmentPtr assignment;
  AssignmentPtr assignment_owners;
  RendezvousStore kv;
  std::vector<WaitId> assignment_waiters;
  // The spec of the current epoch's RunJob, shared by every rank's
  // directive (the server serializes it once per epoch).
  std::shared_ptr<const v1::JobSpec> run_job_spec;
  // Loaded active after a coordinator restart, not yet settled (recovery.h).
  bool recovering = false;
  // The current epoch's checkpoint shards, until each step commits.
  CheckpointTracker checkpoints;
  std::optional<HeldFailure> held_failure;
  // While QUEUED: since when (not durable; restored as submit_time), for
  // the head's reservation (see "Scheduling" in job_table.h).
  absl::Time queued_since;
};

// Sets every rank's `local` from job.job.members()' hosts (one member per
// rank, in rank order, as StartEpoch and recovery build them).
void SetLocalRanks(JobRec& job);

struct JobTableLimits {
  int max_jobs = 100000;
  int max_unfinished_jobs = 10000;
};

// A page of ListJobs.
struct JobPage {
  std::vector<v1::Job> jobs;
  // Empty on the last page.
  std::string next_page_token;
};

class JobTable {
 public:
  static constexpr PageLimits kPages{100, 1000};

  explicit JobTable(JobTableLimits limits) : limits_(limits) {}

  // A new job "job-<n>" for `spec` (valid, defaults applied by the caller),
  // unknown fields dropped, submitted at `now` with `request_id` (valid;
  // empty for none; the caller checked FindSubmission), in no state yet (the
  // caller transitions it to QUEUED and calls MarkQueued).
  absl::StatusOr<JobRec*> Add(v1::JobSpec spec, absl::Time now,
                              std::string request_id = "");
  // OK for an empty id or at most 128 characters of [A-Za-z0-9._:-]
  // (printable, and safe in a log line or a Kubernetes label).
  static absl::Status ValidateRequestId(absl::string_view request_id);
  // The job submitted with `request_id` (non-empty), or null when there is
  // none. AlreadyExists when that job's spec differs from `spec` (defaults
  // applied, as Add stores it): "request_id X was used for job J with a
  // different spec".
  absl::StatusOr<const JobRec*> FindSubmission(absl::string_view request_id,
                                               const v1::JobSpec& spec) const;
  // A job loaded from the state store, queued or active by its state.
  JobRec& Restore(int64_t num, v1::Job job);
  // Takes job `num` out of the table (null if none), to be restored anew
  // after a failed commit. Numbers are not handed out again.
  std::unique_ptr<JobRec> Remove(int64_t num);

  JobRec* Find(int64_t num);
  JobRec* Find(absl::string_view job_id);
  const JobRec* Find(absl::string_view job_id) const;
  absl::StatusOr<JobRec*> Get(absl::string_view job_id);
  absl::StatusOr<const JobRec*> Get(absl::string_view job_id) const;
  // The job, if it is active at `epoch`.
  absl::StatusOr<JobRec*> ActiveAt(absl::string_view job_id, int64_t epoch);

  // Whether `worker_id` holds `rank` of the job's current epoch.
  static absl::Status CheckRank(const JobRec& job, int rank,
                                absl::string_view worker_id);
  // "rank R (worker w-N)", for messages.
  static std::string Who(const JobRec& job, int rank);

  // One edge of the state machine on `job`: state, reason, start time (on
  // leaving QUEUED) and end time (on ending); the state-change event.
  static v1::JobEvent Transition(v1::Job& job, v1::JobState to,
                                 std::string reason, absl::Time now);

  // Job `num` (kept) waits for workers from `now` on.
  void MarkQueued(int64_t num, absl::Time now);
  void MarkActive(int64_t num) {
    Dequeue(num);
    active_.insert(num);
  }
  // An active job back in the queue (at its place by priority and number:
  // ahead of every job of its priority submitted after it), to wait for
  // workers from `now` on.
  void MarkRequeued(int64_t num, absl::Time now) {
    active_.erase(num);
    MarkQueued(num, now);
  }
  void MarkEnded(int64_t num) {
    Dequeue(num);
    active_.erase(num);
  }
  bool HasQueued() const { return !queued_.empty(); }
  // The active jobs' numbers, in order (a copy: callers change the set).
  std::vector<int64_t> ActiveJobs() const {
    return std::vector<int64_t>(active_.begin(), active_.end());
  }

  // The next queued job to start and the workers (by rank) it would run on
  // (see "Scheduling" above), or nullopt when none may start now. `idle(j)`
  // gives the idle workers for job j: asked once for all jobs that are not
  // restarting, and once for each restarting one considered (its own
  // RELEASING members count); never when nothing is queued. A restarting
  // job (restarts > 0) fits on as few as its min_world_size workers, and
  // takes up to world_size. `pool`: workers registered and not draining.
  // O(queued jobs) plus one placement.
  struct Placement {
    JobRec* job;
    std::vector<int64_t> worker_nums;
  };
  std::optional<Placement> PlaceNext(
      absl::FunctionRef<std::vector<IdleWorker>(const JobRec& job)> idle,
      int64_t pool, absl::Time now, absl::Duration reservation_after);

  // When `pool` differs from the last call's: every queued job's reason
  // rewritten by QueuedReason for that pool, and the jobs whose reason
  // changed (to persist). Nothing otherwise.
  std::vector<JobRec*> RefreshQueuedReasons(int64_t pool);

  // Newest first; `states` empty lists every state (see
  // Coordinator::ListJobs).
  absl::StatusOr<JobPage> List(const std::vector<v1::JobState>& states,
                               int page_size, absl::string_view page_token,
                               int64_t max_bytes) const;

  size_t size() const { return jobs_.size(); }

  // Every job, in number order (metrics).
  void ForEach(absl::FunctionRef<void(const JobRec&)> visit) const {
    for (const auto& [num, job] : jobs_) visit(*job);
  }

 private:
  const JobTableLimits limits_;
  int64_t next_num_ = 0;
  std::map<int64_t, std::unique_ptr<JobRec>> jobs_;
  // Queue order: (-priority, job number).
  using QueueKey = std::pair<int64_t, int64_t>;
  static QueueKey KeyOf(const JobRec& job) {
    return {-static_cast<int64_t>(job.job.spec().priority()), job.num};
  }
  void Dequeue(int64_t num);

  std::set<QueueKey> queued_;
  std::set<int64_t> active_;
  // The pool of the last RefreshQueuedReasons; -1 before the first.
  int64_t reasons_pool_ = -1;
  // SubmitJobRequest.request_id -> job number, for the jobs that have one.
  std::map<std::string, int64_t, std::less<>> by_request_id_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_JOB_TABLE_H_
