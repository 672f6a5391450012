// The Coordinator's membership methods: registration, attachments (fast
// loss detection), heartbeats (and the directives they carry), drain, and
// the worker listing.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/ids.h"
#include "coordinator/locked_section.h"
#include "coordinator/worker_reports.h"
#include "security/worker_principal.h"

namespace pshard {
namespace coordinator {
namespace {

absl::Status ActingAsAnother(absl::string_view worker_id,
                             absl::string_view worker_name,
                             absl::string_view caller_name) {
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", worker_id, " is \"", worker_name, "\"; this credential is \"",
      Clip(caller_name, 253),
      "\"'s and may act only as that worker (or its local ranks \"",
      Clip(caller_name, 253), ":<i>\")"));
}

// The workers a worker principal's credential covers (worker_principal.h),
// as the name lookups below need them.
template <typename Visit>
bool AnyWorkerOfPrincipal(absl::string_view principal, const Visit& visit) {
  if (visit(principal)) return true;
  for (int i = 0; i < security::kMaxLocalRanks; ++i) {
    if (visit(security::LocalRankWorkerName(principal, i))) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req) {
  RETURN_IF_ERROR(WorkerRegistry::ValidateRegistration(req));
  Locked lock(this);
  const absl::Time now = clock_->Now();
  WorkerRec* w = workers_.FindByName(req.name());
  // For the log: a new name, a process that restarted, or the same process
  // again (a retry, or confirming itself after the coordinator restarted).
  const char* kind = w == nullptr ? "registered"
                     : w->info.incarnation() != req.incarnation()
                         ? "registered again (a new process)"
                         : "registered again (same process)";
  if (w != nullptr) {
    if (w->info.incarnation() != req.incarnation()) {
      // The process restarted: its old membership ends, and with it its rank.
      if (!w->lost && w->job_num != 0) {
        MarkLost(*w, "it restarted (new incarnation)");
      }
      w->directives.clear();
      w->releasing.reset();  // a new process runs nothing yet
      w->info.set_drain_requested(false);
      *w->info.mutable_registered_time() = ToProto(now);
    }
  } else {
    ASSIGN_OR_RETURN(w, workers_.Add(req.name(), now));
  }
  workers_.Register(*w, req, now);
  PersistWorker(*w);
  Schedule();
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(w->info.id());
  *resp.mutable_heartbeat_interval() = ToProto(options_.heartbeat_interval);
  // Logged with the change, as status reads show it (a commit that fails
  // logs that it undid it). Never the incarnation: it is the credential.
  LOG(INFO) << "worker " << w->info.id() << " (" << w->info.name() << ") "
            << kind << ": host " << w->info.host() << ", address "
            << w->info.address() << ", device "
            << (w->info.device().empty() ? "cpu" : w->info.device());
  RETURN_IF_ERROR(lock.Commit());
  return resp;
}

namespace {

// Why `worker_id` (found as `w`, or null) may not heartbeat or attach.
absl::Status NotCurrent(absl::string_view worker_id, const WorkerRec* w) {
  return absl::NotFoundError(absl::StrCat(
      "worker ", Clip(worker_id, 64),
      w == nullptr ? " is unknown"
                   : (w->lost ? " was declared lost" : " has a newer incarnation"),
      "; register again"));
}

bool IsCurrent(const WorkerRec* w, absl::string_view incarnation) {
  return w != nullptr && !w->lost && w->info.incarnation() == incarnation;
}

}  // namespace

absl::StatusOr<int64_t> Coordinator::AttachWorker(
    const v1::AttachRequest& req) {
  RETURN_IF_ERROR(WorkerRegistry::ValidateAttachment(req));
  Locked lock(this);
  WorkerRec* w = workers_.Find(req.worker_id());
  if (!IsCurrent(w, req.incarnation())) return NotCurrent(req.worker_id(), w);
  // Nothing durable: an attachment lives as long as its stream.
  return workers_.Attach(*w);
}

absl::Status Coordinator::WorkerDetached(absl::string_view worker_id,
                                         absl::string_view incarnation,
                                         int64_t attachment_id) {
  Locked lock(this);
  WorkerRec* w = workers_.Find(worker_id);
  if (!IsCurrent(w, incarnation) || w->attachment_id != attachment_id) {
    return absl::OkStatus();  // a stale stream: nothing to do
  }
  MarkLost(*w, "its connection to the coordinator closed");
  w->attachment_id = 0;
  Schedule();  // a restarted job may have gone back to the queue
  return lock.Commit();
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& req) {
  ASSIGN_OR_RETURN(SharedHeartbeat shared, HeartbeatShared(req));
  if (shared.run_job_spec != nullptr) {
    for (v1::Directive& d : *shared.response.mutable_directives()) {
      if (d.has_run_job()) {
        *d.mutable_run_job()->mutable_spec() = *shared.run_job_spec;
      }
    }
  }
  return std::move(shared.response);
}

absl::StatusOr<Coordinator::SharedHeartbeat> Coordinator::HeartbeatShared(
    const v1::HeartbeatRequest& req,
    std::optional<absl::string_view> caller_name) {
  RETURN_IF_ERROR(ValidateHeartbeat(req));
  Locked lock(this);
  WorkerRec* w = workers_.Find(req.worker_id());
  if (w != nullptr && caller_name.has_value() &&
      !security::WorkerPrincipalMayActAs(*caller_name, w->info.name())) {
    return ActingAsAnother(req.worker_id(), w->info.name(), *caller_name);
  }
  if (!IsCurrent(w, req.incarnation())) return NotCurrent(req.worker_id(), w);
  const absl::Time now = clock_->Now();
  const bool was_confirmed = w->confirmed;
  const bool was_schedulable = workers_.Schedulable(*w, now);
  w->confirmed = true;
  w->heartbeated = true;
  w->last_heartbeat = now;
  if (req.state() == v1::DRAINING && !w->info.drain_requested()) {
    // The worker is on its way out (it was told to drain before).
    w->info.set_drain_requested(true);
    PersistWorker(*w);
  }

  const bool reports_job = !req.job_id().empty() && req.state() != v1::IDLE;
  auto matches_assignment = [&] {
    return w->job_num != 0 && reports_job &&
           req.job_id() == JobId(w->job_num) && req.epoch() == w->epoch;
  };
  w->reports_assignment = matches_assignment();
  // After a coordinator restart this heartbeat may complete the picture of
  // the worker's job; decide before building the reply, which may then
  // carry the restarted job's directives.
  if (w->job_num != 0) CheckRecovery(*jobs_.Find(w->job_num));
  const bool reports_assignment = matches_assignment();
  w->reports_assignment = reports_assignment;

  SharedHeartbeat out;
  v1::HeartbeatResponse& resp = out.response;
  for (v1::Directive& d : w->directives) *resp.add_directives() = std::move(d);
  w->directives.clear();

  if (reports_job && !reports_assignment) {
    // The worker runs something it is not (or no longer) assigned.
    bool already = false;
    for (const v1::Directive& d : resp.directives()) {
      already |= d.has_abort_job() && d.abort_job().job_id() == req.job_id() &&
                 d.abort_job().epoch() == req.epoch();
    }
    if (!already) {
      auto* abort = resp.add_directives()->mutable_abort_job();
      abort->set_job_id(Clip(req.job_id(), 64));
      abort->set_epoch(req.epoch());
      abort->set_reason("this worker is not assigned to that job and epoch");
    }
  }
  if (w->job_num != 0) {
    JobRec& job = *jobs_.Find(w->job_num);
    // For a draining worker's agent: it may leave once this advances.
    for (const v1::CheckpointRecord& record : job.job.checkpoints()) {
      if (record.state() == v1::CheckpointRecord::COMPLETE &&
          record.step() > resp.job_checkpoint_step()) {
        resp.set_job_checkpoint_step(record.step());
      }
    }
    if (reports_assignment) {
      w->acknowledged = true;
      w->missing_reports = 0;
    } else if (!w->acknowledged) {
      // A restart gave the worker the next epoch of the job whose last
      // epoch it is still stopping: it starts this one after that (the
      // agent queues it), so these sends do not count against it.
      const bool stopping_last_epoch =
          reports_job && w->IsReleasing(req.job_id(), req.epoch());
      if (!stopping_last_epoch &&
          ++w->run_job_sends > options_.max_unacknowledged_run_jobs) {
        EndJob(job, v1::FAILED,
               absl::StrCat("worker ", w->info.id(), " (rank ", w->rank,
                            ") did not start the job after ",
                            options_.max_unacknowledged_run_jobs,
                            " RunJob directives"));
      } else {
        auto* run = resp.add_directives()->mutable_run_job();
        run->set_job_id(job.job.id());
        run->set_epoch(job.job.epoch());
        run->set_rank(w->rank);
        run->set_world_size(static_cast<int>(job.ranks.size()));
        run->set_local_rank(job.ranks[w->rank].local.local_rank);
        run->set_local_world_size(job.ranks[w->rank].local.local_world_size);
        run->set_restart_count(job.job.restarts());
        if (job.job.has_resumed_from()) {
          *run->mutable_resume() = job.job.resumed_from();
        }
        if (job.run_job_spec == nullptr) {
          job.run_job_spec = std::make_shared<const v1::JobSpec>(job.job.spec());
        }
        out.run_job_spec = job.run_job_spec;
      }
    } else if (!job.recovering && ++w->missing_reports >= 2) {
      EndJob(job, v1::FAILED,
             absl::StrCat("worker ", w->info.id(), " (rank ", w->rank,
                          ") stopped running the job (it reports ",
                          v1::WorkerState_Name(req.state()),
                          req.job_id().empty() ? "" : " ",
                          Clip(req.job_id(), 64), ")"));
    }
  }
  WorkerRegistry::NoteWhatItRuns(*w, req);
  if (!was_confirmed || (!was_schedulable && workers_.Schedulable(*w, now))) {
    Schedule();
  }
  // A reply without directives only tells the worker to carry on, which no
  // unwritten change of another section can contradict (a change that
  // concerns this worker queues a directive for it). So it waits only for
  // its own writes, not behind a burst of other ranks' results being
  // written (the heartbeat p99 at a 4096-rank job's end).
  RETURN_IF_ERROR(lock.Commit(resp.directives_size() == 0
                                  ? CommitWait::kOwnBatch
                                  : CommitWait::kAllSealed));
  return out;
}

absl::Status Coordinator::CheckWorkerIsNamed(absl::string_view worker_id,
                                             absl::string_view name) const {
  Locked lock(this);
  const WorkerRec* w = workers_.Find(worker_id);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker id \"", Clip(worker_id, 64), "\""));
  }
  if (security::WorkerPrincipalMayActAs(name, w->info.name())) {
    return absl::OkStatus();
  }
  return ActingAsAnother(worker_id, w->info.name(), name);
}

absl::Status Coordinator::CheckHoldsRank(absl::string_view name,
                                         absl::string_view job_id) const {
  Locked lock(this);
  // The credential of a --local_ranks supervisor is shared by its children
  // ("name:<i>"), and a program rank presents its worker's: any of them
  // holding a rank of the job is enough.
  const WorkerRec* found = nullptr;
  if (AnyWorkerOfPrincipal(name, [&](absl::string_view worker_name) {
        const WorkerRec* w = workers_.FindByName(worker_name);
        if (w == nullptr) return false;
        if (found == nullptr) found = w;
        return w->job_num != 0 && JobId(w->job_num) == job_id;
      })) {
    return absl::OkStatus();
  }
  if (found == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "\"", Clip(name, 253), "\" is no registered worker, so it holds no rank of ",
        Clip(job_id, 64)));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", found->info.id(), " (\"", Clip(name, 253),
      "\") holds no rank of ", Clip(job_id, 64)));
}

absl::StatusOr<v1::WorkerInfo> Coordinator::GetWorker(
    absl::string_view worker) const {
  Locked lock(this);
  ASSIGN_OR_RETURN(const WorkerRec* w, workers_.Resolve(worker));
  return WorkerRegistry::InfoOf(*w, clock_->Now());
}

absl::StatusOr<v1::WorkerInfo> Coordinator::DrainWorker(
    absl::string_view worker) {
  return SetDrainRequested(worker, true);
}

absl::StatusOr<v1::WorkerInfo> Coordinator::UndrainWorker(
    absl::string_view worker) {
  return SetDrainRequested(worker, false);
}

absl::StatusOr<v1::WorkerInfo> Coordinator::SetDrainRequested(
    absl::string_view worker, bool drain) {
  Locked lock(this);
  ASSIGN_OR_RETURN(WorkerRec * w, workers_.Resolve(worker));
  if (w->lost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", w->info.id(), " (", w->info.name(),
        ") is LOST; it can be ", drain ? "drained" : "undrained",
        " once it registers again"));
  }
  const bool changed = w->info.drain_requested() != drain;
  if (changed) {
    w->info.set_drain_requested(drain);
    PersistWorker(*w);
    // Undrained, a queued job may fit now; either way the pool changed,
    // and the queued jobs' reasons say whether each can still start.
    Schedule();
  }
  v1::WorkerInfo info = WorkerRegistry::InfoOf(*w, clock_->Now());
  RETURN_IF_ERROR(lock.Commit());
  if (changed) {
    LOG(INFO) << "worker " << info.id() << " (" << info.name() << ") "
              << (drain ? "draining: it finishes its rank, then stops"
                        : "undrained: it is scheduled again");
  }
  return info;
}

absl::StatusOr<Coordinator::WorkerPage> Coordinator::ListWorkers(
    bool include_lost, int page_size, absl::string_view page_token) const {
  Locked lock(this);
  return workers_.List(include_lost, page_size, page_token, clock_->Now());
}

}  // namespace coordinator
}  // namespace pshard
