// The Coordinator facade: construction and loading, the locked section's
// durability and callbacks, the waits, the edges that cut across units
// (a lost worker fails its job, which fails its waits and frees its workers
// for the next job), and Tick. The public methods live by concern in
// coordinator_membership.cc, coordinator_jobs.cc and coordinator_layout.cc.
#include "coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/checkpoint_tracker.h"
#include "coordinator/locked_section.h"
#include "coordinator/recovery.h"
#include "coordinator/restart_policy.h"

namespace pshard {
namespace coordinator {

// ---- Construction and loading ----

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, const Clock* clock,
    std::unique_ptr<StateStore> store) {
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(options), clock, std::move(store)));
  RETURN_IF_ERROR(c->Load());
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock,
                         std::unique_ptr<StateStore> store)
    : options_(std::move(options)),
      kv_limits_{options_.max_kv_key_bytes, options_.max_kv_value_bytes,
                 options_.max_kv_keys_per_job, options_.max_kv_bytes_per_job,
                 options_.max_kv_bytes_total,
                 options_.max_kv_keys_per_read, options_.max_kv_read_bytes},
      clock_(clock),
      store_(std::move(store)),
      workers_({options_.max_workers, options_.worker_timeout,
                options_.recovery_grace, options_.worker_timeout / 2},
               clock->Now()),
      jobs_({options_.max_jobs, options_.max_unfinished_jobs}),
      waits_(options_.max_waiters),
      pending_(std::make_unique<Pending>()),
      commit_(store_.get()),
      notifier_(std::make_unique<Notifier>()) {}

bool Coordinator::WaitForNotifier(absl::Duration timeout) {
  return notifier_->WaitIdle(timeout);
}

bool Coordinator::WaitForPendingWaits(int count,
                                      absl::Duration timeout) const {
  struct Args {
    const Coordinator* c;
    size_t count;
  } args{this, static_cast<size_t>(count)};
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->c->waits_.size() == a->count;
          },
          &args),
      timeout);
}

Coordinator::~Coordinator() {
  // Fail pending waits so that no caller waits for a callback that cannot
  // come any more.
  std::vector<Wait> waits;
  {
    absl::MutexLock lock(&mu_);
    waits = waits_.TakeAll();
  }
  notifier_.reset();  // runs what it holds, then stops
  const absl::Status s = absl::UnavailableError("coordinator shutting down");
  for (Wait& wait : waits) {
    std::visit(
        [&s](auto& w) {
          if (w.done) w.done(s);
        },
        wait);
  }
}

absl::Status Coordinator::Load() {
  ASSIGN_OR_RETURN(StateStore::Snapshot snap, store_->Load());
  std::vector<int64_t> job_nums;
  for (const auto& [num, job] : snap.jobs) job_nums.push_back(num);
  Locked lock(this);
  for (auto& [job, reason] :
       RestoreSnapshot(std::move(snap), clock_->Now(), workers_, jobs_)) {
    EndJob(*job, v1::FAILED, std::move(reason));
  }
  // Checkpoint commits the restart cut short (docs/checkpoints.md).
  int unfinished = 0;
  for (int64_t num : job_nums) {
    JobRec* job = jobs_.Find(num);
    if (job == nullptr) continue;
    if (!IsTerminal(job->job.state())) ++unfinished;
    for (v1::CheckpointRecord& record :
         SettleInterruptedCheckpoints(job->job, clock_->Now())) {
      v1::JobEvent event;
      *event.mutable_checkpoint() = std::move(record);
      AppendEvent(*job, std::move(event));
      PersistJob(*job);
    }
  }
  if (!job_nums.empty()) {
    LOG(INFO) << "restarted on the stored state: " << job_nums.size()
              << " jobs, " << unfinished
              << " unfinished (they continue or restart once their workers "
                 "are back)";
  }
  return lock.Commit();
}

// ---- Durability and callbacks ----

void Coordinator::Defer(Deferred fn) { deferred_.push_back(std::move(fn)); }

void Coordinator::RunDeferred(std::vector<Deferred> fns,
                              const absl::Status& commit) {
  if (static_cast<int>(fns.size()) > options_.max_inline_callbacks &&
      notifier_ != nullptr) {
    notifier_->Post({[fns = std::move(fns), commit] {
      for (const Deferred& fn : fns) fn(commit);
    }});
    return;
  }
  for (auto& fn : fns) fn(commit);
}

absl::Status Coordinator::StoreHealth() const { return commit_.health(); }

void Coordinator::RollBackFailedWrite() {
  if (!commit_.failed()) return;
  // Off the lock: the store holds the last committed state, and nothing is
  // written until TakeFailure below.
  uint64_t failure = 0;
  absl::StatusOr<StateStore::Snapshot> committed =
      commit_.LoadCommitted(&failure);
  if (!committed.ok()) {
    // Still stopped: the next failed epilogue tries again.
    if (commit_.failed()) {
      LOG(ERROR) << "cannot reload the state store: "
                 << committed.status().message();
    }
    return;
  }
  Locked lock(this);
  std::optional<GroupCommit::Failure> failed = commit_.TakeFailure(failure);
  if (!failed.has_value()) return;  // another epilogue rolled it back
  const absl::Status undone = absl::UnavailableError(absl::StrCat(
      "undone: the state store could not commit: ", failed->error.message()));
  LOG(ERROR) << "the state store could not commit (" << failed->error.message()
             << "): its changes are undone, answered Unavailable";
  RestoredRecords restored =
      RestoreRecords(*std::move(committed), failed->jobs, failed->workers,
                     workers_, jobs_);
  for (std::unique_ptr<JobRec>& old : restored.replaced) {
    FailJobWaiters(*old, undone);
    WakeEventWaiters(old->log.TakeWaiters());
  }
  // Their loss comes back (its job's change was undone with the rest).
  for (WorkerRec* w : restored.lost_members) {
    if (w->job_num != 0) MarkLost(*w, "it was lost while the state store failed");
  }
  // Written by the next epilogue (Tick's at the latest); a failure then
  // rolls back again.
  Seal();
}

void Coordinator::PersistJob(const JobRec& job) {
  pending_->jobs.insert(job.num);
}

void Coordinator::PersistWorker(const WorkerRec& w) {
  pending_->workers.insert(w.num);
}

uint64_t Coordinator::Seal() {
  if (pending_->jobs.empty() && pending_->workers.empty() &&
      pending_->events.empty() && pending_->assignments.empty() &&
      pending_->finished_ranks.empty()) {
    return 0;
  }
  StateStore::Batch batch;
  for (int64_t num : pending_->jobs) {
    if (const JobRec* j = jobs_.Find(num)) batch.jobs.emplace_back(num, j->job);
  }
  for (int64_t num : pending_->workers) {
    if (const WorkerRec* w = workers_.Find(num)) {
      batch.workers.emplace_back(num, w->info);
    }
  }
  batch.events = std::move(pending_->events);
  batch.assignments = std::move(pending_->assignments);
  batch.finished_ranks = std::move(pending_->finished_ranks);
  pending_ = std::make_unique<Pending>();
  return commit_.Seal(std::move(batch));
}

// ---- Waits ----

absl::Time Coordinator::CapDeadline(absl::Time deadline) const {
  return std::min(deadline, clock_->Now() + options_.max_wait);
}

Coordinator::WaitId Coordinator::Park(Wait wait, absl::Time deadline) {
  return waits_.Park(std::move(wait), CapDeadline(deadline));
}

void Coordinator::CancelWait(WaitId id) {
  absl::MutexLock lock(&mu_);
  waits_.Cancel(id);  // per-job lists skip ids that are gone
}

void Coordinator::WakeEventWaiters(const std::vector<WaitId>& ids) {
  for (WaitId id : ids) {
    std::optional<EventsWait> w = waits_.Take<EventsWait>(id);
    if (!w) continue;
    DeferAnswer(std::move(w->done), absl::OkStatus());
  }
}

void Coordinator::FailJobWaiters(JobRec& job, const absl::Status& status) {
  // Ends the waits of kind W in `ids` (those not already gone) with
  // `status`.
  auto fail = [&](auto kind, std::vector<WaitId> ids)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    using W = decltype(kind);
    for (WaitId id : ids) {
      std::optional<W> w = waits_.Take<W>(id);
      if (!w) continue;
      DeferAnswer(std::move(w->done), status);
    }
  };
  // The rendezvous store goes with its waits: a new epoch starts empty.
  fail(KvWait{}, job.kv.Clear(kv_bytes_total_));
  fail(AssignmentWait{}, std::exchange(job.assignment_waiters, {}));
  fail(LayoutWait{}, job.layout.TakeWaiters());
}

void Coordinator::Expire(Wait& wait) {
  std::visit(
      [this](auto& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        using W = std::decay_t<decltype(w)>;
        if constexpr (std::is_same_v<W, LayoutWait>) {
          // Nobody sent the layout in full in time: this rank sends it.
          v1::ReportBucketsResponse send;
          send.set_send_layout(true);
          DeferAnswer(std::move(w.done), send);
        } else {
          std::string what = "no new event before the deadline";
          if constexpr (std::is_same_v<W, KvWait>) {
            DeferAnswer(std::move(w.done), KvReadMissing(w.read));
            return;
          } else if constexpr (std::is_same_v<W, AssignmentWait>) {
            what = "assignment not published before the deadline";
            if (const JobRec* j = jobs_.Find(w.job_num)) {
              absl::StrAppend(&what, " (", j->layout.reported(), " of ",
                              j->ranks.size(),
                              " ranks reported their bucket layout)");
            }
          }
          DeferAnswer(std::move(w.done), absl::DeadlineExceededError(what));
        }
      },
      wait);
}

// ---- Cross-cutting edges ----

namespace {

// The log line of each job event that is an edge (not progress): what the
// event log records, for the operator's log (docs/user-guide.md,
// "Troubleshooting").
void LogJobEvent(const v1::Job& job, const v1::JobEvent& event) {
  switch (event.event_case()) {
    case v1::JobEvent::kStateChange: {
      const v1::JobEvent::StateChange& change = event.state_change();
      if (change.from() == v1::JOB_STATE_UNSPECIFIED) {
        LOG(INFO) << "job " << job.id() << " submitted (world_size "
                  << job.spec().world_size() << ", max_restarts "
                  << job.spec().max_restarts() << "): " << change.reason();
        return;
      }
      (change.to() == v1::FAILED ? LOG(WARNING) : LOG(INFO))
          << "job " << job.id() << ": " << v1::JobState_Name(change.from())
          << " -> " << v1::JobState_Name(change.to()) << " (epoch "
          << job.epoch() << "): " << change.reason();
      return;
    }
    case v1::JobEvent::kRestart: {
      const v1::JobEvent::Restart& restart = event.restart();
      LOG(WARNING) << "job " << job.id() << ": restart " << restart.restart()
                   << " of " << job.spec().max_restarts() << " in epoch "
                   << restart.epoch() << " on " << restart.world_size()
                   << " workers"
                   << (restart.has_resumed_from()
                           ? absl::StrCat(", from step ",
                                          restart.resumed_from().step())
                           : std::string())
                   << ", after: " << restart.cause();
      return;
    }
    case v1::JobEvent::kCheckpoint: {
      const v1::CheckpointRecord& record = event.checkpoint();
      if (record.state() == v1::CheckpointRecord::COMPLETE) {
        LOG(INFO) << "job " << job.id() << ": checkpoint step "
                  << record.step() << " committed (epoch " << record.epoch()
                  << ", " << record.world_size() << " shards, "
                  << record.size_bytes() << " bytes) at " << record.path()
                  << (record.reason().empty() ? "" : ": ") << record.reason();
      } else if (record.state() == v1::CheckpointRecord::FAILED) {
        LOG(WARNING) << "job " << job.id() << ": checkpoint step "
                     << record.step() << " failed (epoch " << record.epoch()
                     << "): " << record.reason();
      }
      return;
    }
    default:
      return;  // progress: not per step
  }
}

}  // namespace

void Coordinator::AppendEvent(JobRec& job, v1::JobEvent event) {
  LogJobEvent(job.job, event);
  std::vector<WaitId> woken = job.log.Append(std::move(event), clock_->Now());
  pending_->events.emplace_back(job.num, job.log.last());
  WakeEventWaiters(woken);
}

void Coordinator::Transition(JobRec& job, v1::JobState to,
                             std::string reason) {
  AppendEvent(job, JobTable::Transition(job.job, to, std::move(reason),
                                        clock_->Now()));
  PersistJob(job);
}

void Coordinator::FlushProgress(JobRec& job) {
  AppendEvent(job, job.log.TakeProgressEvent(job.job.progress(), clock_->Now()));
  PersistJob(job);
}

void Coordinator::ReleaseRank(JobRec& job, int rank, bool send_abort,
                              absl::string_view reason) {
  WorkerRec* w = workers_.Find(job.ranks[rank].worker_num);
  if (w == nullptr || !w->Holds(job.num, job.job.epoch())) return;
  // A worker told to run the rank may be inside it (a long compute step
  // does not stop at once): it is RELEASING until it says it stopped.
  const bool may_run = w->acknowledged || w->run_job_sends > 0;
  w->Release();
  if (send_abort && !w->lost && may_run) {
    w->releasing = WorkerRec::Releasing{job.job.id(), job.job.epoch(), rank};
  }
  if (send_abort && !w->lost) {
    v1::Directive d;
    auto* abort = d.mutable_abort_job();
    abort->set_job_id(job.job.id());
    abort->set_epoch(job.job.epoch());
    abort->set_reason(std::string(reason));
    w->directives.push_back(std::move(d));
  }
}

void Coordinator::EndJob(JobRec& job, v1::JobState state, std::string reason) {
  if (IsTerminal(job.job.state())) return;
  jobs_.MarkEnded(job.num);
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    if (!job.ranks[r].finished) {
      ReleaseRank(job, r, state != v1::SUCCEEDED,
                  absl::StrCat(v1::JobState_Name(state), ": ", reason));
    }
  }
  job.recovering = false;
  job.held_failure.reset();
  if (job.log.progress_dirty()) FlushProgress(job);
  Transition(job, state, reason);
  FailJobWaiters(job, absl::AbortedError(absl::StrCat(
                          job.job.id(), " ended (", v1::JobState_Name(state),
                          "): ", reason)));
  job.layout.DropReference();
}

void Coordinator::StartEpoch(JobRec& job,
                             const std::vector<int64_t>& worker_nums,
                             std::string reason) {
  FailJobWaiters(job, absl::AbortedError(absl::StrCat(
                          job.job.id(), " restarted with epoch ",
                          job.job.epoch() + 1)));
  job.layout.Reset(static_cast<int>(worker_nums.size()));
  job.checkpoints.Reset();
  job.recovering = false;
  job.held_failure.reset();
  job.job.set_epoch(job.job.epoch() + 1);
  job.job.clear_members();
  job.run_job_spec.reset();
  job.ranks.assign(worker_nums.size(), RankRec{});
  job.finished_ranks = 0;
  for (size_t r = 0; r < worker_nums.size(); ++r) {
    WorkerRec& w = *workers_.Find(worker_nums[r]);
    job.ranks[r].worker_num = w.num;
    v1::JobMember* m = job.job.add_members();
    m->set_rank(static_cast<int>(r));
    m->set_worker_id(w.info.id());
    m->set_host(w.info.host());
    w.Assign(job.num, job.job.epoch(), static_cast<int>(r));
  }
  SetLocalRanks(job);
  jobs_.MarkActive(job.num);
  Transition(job, v1::STARTING, std::move(reason));
}

void Coordinator::Schedule() {
  if (!jobs_.HasQueued()) return;
  const int64_t pool = workers_.Available();
  while (std::optional<JobTable::Placement> placed = jobs_.PlaceNext(
             [this](const JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
               // A job waiting to restart takes its own old members back,
               // as FailOrRestart does.
               return workers_.Idle(clock_->Now(), job.job.restarts() > 0
                                                       ? job.job.id()
                                                       : std::string());
             },
             pool, clock_->Now(), options_.head_reservation_after)) {
    JobRec& job = *placed->job;
    if (job.job.restarts() > 0) {  // it waited for workers to restart
      RestartEpoch(job, placed->worker_nums,
                   RestartReasonOfWaiting(job.job.reason()));
      continue;
    }
    StartEpoch(job, placed->worker_nums,
               absl::StrCat("scheduled on ", job.job.spec().world_size(),
                            " workers (epoch ", job.job.epoch() + 1, ")"));
  }
  // The pool changed (a worker registered, was lost, drained): a queued
  // job may now be able to start some day, or no longer.
  for (JobRec* job : jobs_.RefreshQueuedReasons(pool)) PersistJob(*job);
}

void Coordinator::MarkLost(WorkerRec& w, const std::string& why) {
  LOG(WARNING) << "worker " << w.info.id() << " (" << w.info.name()
               << ") lost: " << why;
  w.lost = true;
  w.directives.clear();
  w.releasing.reset();  // whatever it ran is gone with it
  if (w.job_num != 0) {
    if (JobRec* job = jobs_.Find(w.job_num)) {
      std::string cause;
      if (job->held_failure) {
        // The loss explains the rank's failure held for the blame window.
        const HeldFailure& held = *job->held_failure;
        cause = absl::StrCat(JobTable::Who(*job, w.rank), " lost: ", why,
                             "; ", JobTable::Who(*job, held.rank),
                             " then failed: ", held.error);
      } else {
        cause = absl::StrCat("worker ", w.info.id(), " (rank ", w.rank,
                             ") lost: ", why);
      }
      FailOrRestart(*job, std::move(cause), /*restartable=*/true);
    }
  }
  // EndJob released the rank; make sure nothing stays attached.
  w.job_num = 0;
  w.rank = -1;
}

void Coordinator::FailOrRestart(JobRec& job, std::string cause,
                                bool restartable, int64_t excluded_worker) {
  job.held_failure.reset();
  const v1::JobSpec& spec = job.job.spec();
  if (!restartable || spec.max_restarts() == 0) {
    EndJob(job, v1::FAILED, std::move(cause));
    return;
  }
  if (job.job.restarts() >= spec.max_restarts()) {
    EndJob(job, v1::FAILED,
           absl::StrCat(cause, " (no restart left: ", spec.max_restarts(),
                        " of ", spec.max_restarts(), " used)"));
    return;
  }
  // Abort the old epoch's ranks; those that may run again are survivors.
  std::set<int64_t> survivors;
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    if (!job.ranks[r].finished) {
      ReleaseRank(job, r, true, absl::StrCat("job restarting after: ", cause));
    }
    if (job.ranks[r].worker_num != excluded_worker) {
      survivors.insert(job.ranks[r].worker_num);
    }
  }
  job.job.set_restarts(job.job.restarts() + 1);
  const std::string reason =
      RestartReason(job.job.restarts(), spec.max_restarts(), cause);
  // Its own old members count as idle: each runs the new epoch once it has
  // stopped the old one (Heartbeat waits for that).
  std::vector<IdleWorker> idle = workers_.Idle(clock_->Now(), job.job.id());
  idle.erase(std::remove_if(idle.begin(), idle.end(),
                            [&](const IdleWorker& w) {
                              return w.num == excluded_worker;
                            }),
             idle.end());
  std::vector<int64_t> placed = PlaceRestart(
      idle, survivors, spec.world_size(), MinRestartWorld(spec));
  if (!placed.empty()) {
    RestartEpoch(job, placed, reason);
    return;
  }
  // Too few workers: wait at the head of the queue, ranks and waits gone.
  FailJobWaiters(job, absl::AbortedError(absl::StrCat(
                          job.job.id(), " waits for workers to restart")));
  job.layout.DropReference();
  job.ranks.clear();
  job.finished_ranks = 0;
  job.job.clear_members();
  job.run_job_spec.reset();
  jobs_.MarkRequeued(job.num, clock_->Now());
  Transition(job, v1::QUEUED,
             QueuedReason(reason, spec, /*restarting=*/true,
                          workers_.Available()));
}

void Coordinator::RestartEpoch(JobRec& job,
                               const std::vector<int64_t>& worker_nums,
                               const std::string& restart_reason) {
  const std::string resume_note = ChooseResumePoint(job);
  v1::JobEvent event;
  v1::JobEvent::Restart* restart = event.mutable_restart();
  restart->set_restart(job.job.restarts());
  restart->set_epoch(job.job.epoch() + 1);
  restart->set_cause(CauseOfRestartReason(restart_reason));
  restart->set_world_size(static_cast<int>(worker_nums.size()));
  if (job.job.has_resumed_from()) {
    *restart->mutable_resumed_from() = job.job.resumed_from();
  }
  AppendEvent(job, std::move(event));
  StartEpoch(job, worker_nums,
             resume_note.empty() ? restart_reason
                                 : absl::StrCat(restart_reason, "; ", resume_note));
}

void Coordinator::DecideHeldFailure(JobRec& job) {
  const HeldFailure held = *job.held_failure;
  const std::string failed =
      absl::StrCat(JobTable::Who(job, held.rank), " failed: ", held.error);
  const bool blamed = held.blamed_rank >= 0 &&
                      held.blamed_rank < static_cast<int>(job.ranks.size()) &&
                      held.blamed_rank != held.rank;
  FailOrRestart(job,
                blamed ? absl::StrCat(JobTable::Who(job, held.blamed_rank),
                                      " stopped answering; ",
                                      JobTable::Who(job, held.rank),
                                      " then failed: ", held.error)
                       : failed,
                /*restartable=*/true);
}

void Coordinator::Acknowledge(JobRec& job, int rank) {
  WorkerRec* w = workers_.Find(job.ranks[rank].worker_num);
  if (w != nullptr && w->Holds(job.num, job.job.epoch())) {
    w->acknowledged = true;
  }
}

void Coordinator::CheckRecovery(JobRec& job) {
  if (!job.recovering) return;
  RecoveryDecision decision = DecideRecovery(job, workers_);
  switch (decision.action) {
    case RecoveryAction::kWait:
      return;
    case RecoveryAction::kContinue:
      job.recovering = false;
      LOG(INFO) << "job " << job.job.id() << ": every worker is back after "
                << "the coordinator's restart; continues in epoch "
                << job.job.epoch();
      return;
    case RecoveryAction::kFail:
      job.recovering = false;
      EndJob(job, v1::FAILED, std::move(decision.reason));
      return;
    case RecoveryAction::kRestart:
      job.recovering = false;
      for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
        if (!job.ranks[r].finished) ReleaseRank(job, r, true, "job restarted");
      }
      const std::string resume_note = ChooseResumePoint(job);
      StartEpoch(job, decision.worker_nums,
                 resume_note.empty()
                     ? std::move(decision.reason)
                     : absl::StrCat(decision.reason, "; ", resume_note));
      return;
  }
}

// ---- Time ----

void Coordinator::Tick() {
  Locked lock(this);
  const absl::Time now = clock_->Now();
  std::vector<WorkerRegistry::Loss> losses = workers_.DueLosses(now);
  // All are lost before any job restarts, so no restart picks one of them.
  for (WorkerRegistry::Loss& loss : losses) loss.worker->lost = true;
  for (WorkerRegistry::Loss& loss : losses) MarkLost(*loss.worker, loss.why);
  // Wait deadlines, earliest first.
  for (Wait& wait : waits_.TakeExpired(now)) Expire(wait);
  for (int64_t num : jobs_.ActiveJobs()) {
    JobRec& job = *jobs_.Find(num);
    if (job.log.progress_dirty() &&
        job.log.ProgressDue(now, options_.progress_event_interval)) {
      FlushProgress(job);
    }
    CheckRecovery(job);
    if (job.held_failure && now >= job.held_failure->decide_at) {
      DecideHeldFailure(job);
    }
  }
  Schedule();
  absl::Status s = lock.Commit();
  if (!s.ok()) {
    // Nothing to answer here (the commit rolled back what it held).
    LOG(ERROR) << "state store commit failed in Tick: " << s.message();
  } else if (!commit_.health().ok()) {
    // Nothing failed now, but the latest write did: whether the store
    // commits again (health recovers by itself, without a client's change).
    commit_.Probe().IgnoreError();
  }
}

}  // namespace coordinator
}  // namespace pshard
