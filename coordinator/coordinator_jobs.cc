// The Coordinator's job methods: submit, read, list and cancel jobs, their
// event logs, and the progress and results their ranks report.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/spec_fingerprint.h"
#include "common/job_spec.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/ids.h"
#include "coordinator/locked_section.h"
#include "coordinator/restart_policy.h"
#include "coordinator/worker_reports.h"

namespace pshard {
namespace coordinator {

// ---- Jobs and events ----

absl::StatusOr<v1::ResumePoint> Coordinator::ResolveFromCheckpoint(
    const v1::JobSpec& spec) {
  const std::string& path = spec.from_checkpoint();
  // Reads the manifest and hashes every shard: GBs for a large model, so
  // the caller holds no lock.
  absl::StatusOr<checkpoint::CompleteCheckpoint> resolved =
      checkpoint::ResolveCheckpoint(path);
  if (!resolved.ok()) {
    const absl::StatusCode code =
        absl::IsInvalidArgument(resolved.status())
            ? absl::StatusCode::kInvalidArgument
            : absl::StatusCode::kFailedPrecondition;
    return absl::Status(
        code, absl::StrCat("from_checkpoint: ", Clip(path, 512),
                           " is not a complete checkpoint: ",
                           Clip(resolved.status().message(), 2048)));
  }
  ASSIGN_OR_RETURN(const std::string fingerprint,
                   checkpoint::SpecFingerprint(spec));
  const checkpoint::Manifest& manifest = resolved->manifest;
  if (manifest.spec_fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "from_checkpoint: ", Clip(resolved->step_dir, 512),
        " was written by another model or optimizer: its spec fingerprint is ",
        Clip(manifest.spec_fingerprint, 64), " but this spec's (workload, "
        "optimizer, seed) is ", fingerprint));
  }
  if (manifest.step >= spec.steps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "from_checkpoint: ", Clip(resolved->step_dir, 512), " is at step ",
        manifest.step, ", not before steps (", spec.steps(),
        "): nothing would be left to run"));
  }
  v1::ResumePoint point;
  point.set_path(resolved->step_dir);
  point.set_step(manifest.step);
  return point;
}

absl::StatusOr<v1::Job> Coordinator::SubmitJob(const v1::JobSpec& spec,
                                               absl::string_view request_id,
                                               absl::string_view owner) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(JobTable::ValidateRequestId(request_id));
  v1::JobSpec with_defaults = ApplyJobSpecDefaults(spec);
  // The first job of a retried submission (nullopt for a new one), answered
  // once it is durable: nothing changed, but the first submission's commit
  // may still be in flight.
  auto first_of_retry =
      [&](Locked& lock) -> absl::StatusOr<std::optional<v1::Job>> {
    if (request_id.empty()) return std::nullopt;
    ASSIGN_OR_RETURN(const JobRec* first,
                     jobs_.FindSubmission(request_id, with_defaults));
    if (first == nullptr) return std::nullopt;
    if (first->job.owner() != owner) {
      return absl::AlreadyExistsError(absl::StrCat(
          "request_id \"", request_id,
          "\" was used by another principal's submission; choose another"));
    }
    v1::Job out = first->job;
    RETURN_IF_ERROR(lock.Commit());
    return out;
  };
  std::optional<v1::ResumePoint> initialized_from;
  if (!with_defaults.from_checkpoint().empty()) {
    // A retry is answered before from_checkpoint is resolved again: that
    // hashes every shard, and the checkpoint may have been pruned since the
    // first submission took it.
    {
      Locked lock(this);
      ASSIGN_OR_RETURN(std::optional<v1::Job> first, first_of_retry(lock));
      if (first.has_value()) return *std::move(first);
    }
    ASSIGN_OR_RETURN(initialized_from, ResolveFromCheckpoint(with_defaults));
  }
  Locked lock(this);
  // (Again for a checkpoint job: a concurrent retry may have added it while
  // the lock was released.)
  ASSIGN_OR_RETURN(std::optional<v1::Job> first, first_of_retry(lock));
  if (first.has_value()) return *std::move(first);
  ASSIGN_OR_RETURN(JobRec * j,
                   jobs_.Add(std::move(with_defaults), clock_->Now(),
                             std::string(request_id)));
  JobRec& job = *j;
  job.job.set_owner(std::string(owner));
  std::string prefix = "submitted";
  if (initialized_from.has_value()) {
    *job.job.mutable_initialized_from() = *initialized_from;
    // The first epoch's RunJob directives carry it: steps s+1..steps.
    *job.job.mutable_resumed_from() = *initialized_from;
    job.job.mutable_progress()->set_step(initialized_from->step());
    prefix = absl::StrCat(InitializedFromNote(*initialized_from), "; ", prefix);
  }
  Transition(job, v1::QUEUED,
             QueuedReason(prefix, job.job.spec(), /*restarting=*/false,
                          workers_.Available()));
  // Transition() set start_time because it left UNSPECIFIED: undo that.
  job.job.clear_start_time();
  jobs_.MarkQueued(job.num, clock_->Now());
  Schedule();
  v1::Job out = job.job;
  RETURN_IF_ERROR(lock.Commit());
  return out;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(absl::string_view job_id) const {
  Locked lock(this);
  ASSIGN_OR_RETURN(const JobRec* j, jobs_.Get(job_id));
  return j->job;
}

absl::StatusOr<Coordinator::JobPage> Coordinator::ListJobs(
    const std::vector<v1::JobState>& states, int page_size,
    absl::string_view page_token, int64_t max_bytes) const {
  Locked lock(this);
  return jobs_.List(states, page_size, page_token, max_bytes);
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(absl::string_view job_id,
                                               absl::string_view reason) {
  if (reason.size() > static_cast<size_t>(options_.max_reason_length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason: at most ", options_.max_reason_length,
                     " characters, got ", reason.size()));
  }
  Locked lock(this);
  ASSIGN_OR_RETURN(JobRec * j, jobs_.Get(job_id));
  if (IsTerminal(j->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), " has already ended (",
                     v1::JobState_Name(j->job.state()), ")"));
  }
  EndJob(*j, v1::CANCELLED,
         reason.empty() ? std::string("cancelled by user")
                        : absl::StrCat("cancelled: ", Clip(reason)));
  Schedule();
  v1::Job out = j->job;
  RETURN_IF_ERROR(lock.Commit());
  return out;
}

absl::StatusOr<Coordinator::EventBatch> Coordinator::GetEvents(
    absl::string_view job_id, int64_t after_sequence, int max) const {
  if (after_sequence < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("after_sequence: must be >= 0, got ", after_sequence));
  }
  Locked lock(this);
  ASSIGN_OR_RETURN(const JobRec* j, jobs_.Get(job_id));
  EventBatch batch;
  batch.events = j->log.Read(after_sequence, max);
  batch.terminal = IsTerminal(j->job.state());
  return batch;
}

Coordinator::WaitId Coordinator::WaitForEvents(absl::string_view job_id,
                                               int64_t after_sequence,
                                               absl::Time deadline,
                                               EventsCallback done) {
  Locked lock(this);
  JobRec* j = jobs_.Find(job_id);
  absl::Status immediate;
  bool ready = false;
  if (j == nullptr) {
    immediate = absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  } else if (j->log.HasEventAfter(after_sequence) ||
             IsTerminal(j->job.state())) {
    ready = true;
  } else if (clock_->Now() >= deadline) {
    immediate = absl::DeadlineExceededError("no new event before the deadline");
  } else {
    immediate = waits_.CheckCapacity();
  }
  if (ready || !immediate.ok()) {
    DeferAnswer(std::move(done), immediate);
    return 0;
  }
  const WaitId id = Park(EventsWait{j->num, std::move(done)}, deadline);
  j->log.AddWaiter(id);
  return id;
}

// ---- Progress and results ----

absl::StatusOr<v1::ReportProgressResponse> Coordinator::ReportProgress(
    const v1::ReportProgressRequest& req) {
  Locked lock(this);
  ASSIGN_OR_RETURN(JobRec * j, jobs_.Get(req.job_id()));
  RETURN_IF_ERROR(ValidateProgress(req.progress(), j->job.spec()));
  v1::ReportProgressResponse resp;
  if (!IsActive(j->job.state()) || req.epoch() != j->job.epoch()) {
    resp.set_abort(true);
    return resp;
  }
  RETURN_IF_ERROR(JobTable::CheckRank(*j, req.rank(), req.worker_id()));
  Acknowledge(*j, req.rank());
  if (req.rank() == 0) {
    v1::JobProgress* p = j->job.mutable_progress();
    *p = req.progress();
    p->DiscardUnknownFields();
    p->set_total_steps(j->job.spec().steps());
    j->log.NoteProgress();
    if (j->log.ProgressDue(clock_->Now(), options_.progress_event_interval) ||
        p->step() >= p->total_steps()) {
      FlushProgress(*j);
    }
  }
  RETURN_IF_ERROR(lock.Commit());
  return resp;
}

absl::Status Coordinator::ReportResult(const v1::ReportResultRequest& req) {
  Locked lock(this);
  ASSIGN_OR_RETURN(const bool changed, ReportResultLocked(req));
  return changed ? lock.Commit() : absl::OkStatus();
}

void Coordinator::ReportResultAsync(const v1::ReportResultRequest& req,
                                    std::function<void(absl::Status)> done) {
  Locked lock(this);
  absl::StatusOr<bool> changed = ReportResultLocked(req);
  if (changed.ok() && *changed) {
    lock.CommitInBackground(std::move(done));
    return;
  }
  DeferAnswer(std::move(done), changed.status());
}

absl::StatusOr<bool> Coordinator::ReportResultLocked(
    const v1::ReportResultRequest& req) {
  ASSIGN_OR_RETURN(JobRec * j, jobs_.Get(req.job_id()));
  RETURN_IF_ERROR(ValidateResult(req, j->job.spec()));
  // A result is the rank's last word: a worker RELEASING it has stopped.
  WorkerRec* reporter = workers_.Find(req.worker_id());
  const bool freed = reporter != nullptr &&
                     reporter->IsReleasing(req.job_id(), req.epoch());
  if (freed) reporter->releasing.reset();
  if (!IsActive(j->job.state()) || req.epoch() != j->job.epoch()) {
    if (!freed) return false;  // Nothing to do.
    Schedule();  // the worker is free now
    return true;
  }
  RETURN_IF_ERROR(JobTable::CheckRank(*j, req.rank(), req.worker_id()));
  const int rank = req.rank();
  if (j->ranks[rank].finished) return false;  // a retry
  if (!req.ok()) {
    const int64_t worker_num = j->ranks[rank].worker_num;
    j->ranks[rank].finished = true;
    ++j->finished_ranks;
    ReleaseRank(*j, rank, false, "");
    const std::string error =
        req.error().empty() ? "no error given" : Clip(req.error());
    const v1::FailureCause cause = req.cause();
    if (cause == v1::FAILURE_CAUSE_PEER && !j->held_failure &&
        options_.blame_window > absl::ZeroDuration()) {
      // The peer this rank lost is likely about to be known lost: give it
      // the window to take the blame (Tick decides when none does).
      j->held_failure = HeldFailure{
          rank, error, req.has_blamed_rank() ? req.blamed_rank() : -1,
          clock_->Now() + options_.blame_window};
    } else if (!j->held_failure || !RestartableCause(j->job.spec(), cause)) {
      // A second PEER or WORKER failure within the window adds nothing to
      // the held one; the job's own failure ends it at once.
      FailOrRestart(*j, absl::StrCat(JobTable::Who(*j, rank), " failed: ", error),
                    RestartableCause(j->job.spec(), cause),
                    cause == v1::FAILURE_CAUSE_WORKER ? worker_num : 0);
    }
    Schedule();
    return true;
  }
  // A program job's ranks may end without ever using the client library
  // (no layout, no assignment: the job stays STARTING); its agent's
  // success is the program's exit status 0.
  if (j->job.state() != v1::RUNNING && !j->job.spec().has_program()) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), ": rank ", rank,
                     " reported success before the assignment was published"));
  }
  if (req.output_path().size() > 4096) {
    return absl::InvalidArgumentError("output_path: at most 4096 characters");
  }
  j->ranks[rank].finished = true;
  ++j->finished_ranks;
  pending_->finished_ranks.push_back({j->num, j->job.epoch(), rank});
  ReleaseRank(*j, rank, false, "");
  if (rank == 0) {
    if (!req.output_path().empty()) j->job.set_output_path(req.output_path());
    if (req.final_step() > j->job.progress().step()) {
      j->job.mutable_progress()->set_step(req.final_step());
      j->log.NoteProgress();
    }
    PersistJob(*j);
  }
  if (j->held_failure &&
      j->finished_ranks == static_cast<int>(j->ranks.size())) {
    DecideHeldFailure(*j);  // every other rank is done: nothing more to learn
  } else if (j->finished_ranks == static_cast<int>(j->ranks.size())) {
    EndJob(*j, v1::SUCCEEDED,
           absl::StrCat("all ", j->ranks.size(), " ranks finished ",
                        j->job.progress().step(), " steps"));
  }
  Schedule();
  return true;
}


}  // namespace coordinator
}  // namespace pshard
