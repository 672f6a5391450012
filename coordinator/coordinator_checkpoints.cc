// The Coordinator's checkpoint commits: ranks report their shards; the last
// one of a step makes the coordinator write the step's manifest (the commit
// point, docs/checkpoints.md) and prune, and record the outcome.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/spec_fingerprint.h"
#include "common/job_state.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/ids.h"
#include "coordinator/locked_section.h"

namespace pshard {
namespace coordinator {
namespace {

// Records kept per job: every complete checkpoint still on disk, and the
// newest failed ones; a job failing every checkpoint for days keeps only
// this many.
constexpr int kMaxCheckpointRecords = 64;

v1::CheckpointRecord* FindRecord(v1::Job& job, int64_t step, int64_t epoch) {
  for (v1::CheckpointRecord& c : *job.mutable_checkpoints()) {
    if (c.step() == step && c.epoch() == epoch) return &c;
  }
  return nullptr;
}

// Drops the records of pruned directories, then the oldest records beyond
// the bound (never the newest complete one).
void TrimRecords(v1::Job& job, const std::vector<std::string>& pruned) {
  auto* records = job.mutable_checkpoints();
  for (int i = records->size() - 1; i >= 0; --i) {
    for (const std::string& dir : pruned) {
      if (records->Get(i).path() == dir) {
        records->DeleteSubrange(i, 1);
        break;
      }
    }
  }
  int newest_complete = -1;
  for (int i = 0; i < records->size(); ++i) {
    if (records->Get(i).state() == v1::CheckpointRecord::COMPLETE) {
      newest_complete = i;
    }
  }
  for (int i = 0; records->size() > kMaxCheckpointRecords && i < records->size();) {
    if (i == newest_complete) {
      ++i;
      continue;
    }
    records->DeleteSubrange(i, 1);
    if (newest_complete > i) --newest_complete;
  }
}

}  // namespace

std::string Coordinator::InitializedFromNote(const v1::ResumePoint& point) {
  return absl::StrCat("initialised from ", point.path(), " (step ",
                      point.step(), ")");
}

std::string Coordinator::ChooseResumePoint(JobRec& job) {
  job.job.clear_resumed_from();
  // A job without its own complete checkpoint resumes where it was
  // initialised, never from step 0 (the fallback below).
  const bool initialized = job.job.has_initialized_from();
  if (!job.job.spec().has_checkpoint() && !initialized) return "";
  // Shards of the ended epoch that never all came in: never complete now.
  for (v1::CheckpointRecord& record : *job.job.mutable_checkpoints()) {
    if (record.state() == v1::CheckpointRecord::WRITING) {
      record.set_state(v1::CheckpointRecord::FAILED);
      record.set_reason("its epoch ended before every shard was in");
      *record.mutable_time() = ToProto(clock_->Now());
    }
  }
  std::vector<std::string> skipped;
  const auto& records = job.job.checkpoints();
  for (int i = records.size() - 1; i >= 0; --i) {
    const v1::CheckpointRecord& record = records[i];
    if (record.state() != v1::CheckpointRecord::COMPLETE) continue;
    absl::StatusOr<checkpoint::Manifest> verified =
        checkpoint::VerifyCheckpoint(record.path());
    if (!verified.ok()) {
      skipped.push_back(absl::StrCat("step ", record.step(), " refused: ",
                                     Clip(verified.status().message(), 512)));
      continue;
    }
    v1::ResumePoint* resume = job.job.mutable_resumed_from();
    resume->set_path(record.path());
    resume->set_step(record.step());
    job.job.mutable_progress()->set_step(record.step());
    break;
  }
  std::string note;
  if (job.job.has_resumed_from()) {
    note = absl::StrCat("resuming from step ", job.job.resumed_from().step());
  } else if (initialized) {
    // Verified at submission; each rank verifies it again as it loads it.
    *job.job.mutable_resumed_from() = job.job.initialized_from();
    job.job.mutable_progress()->set_step(job.job.initialized_from().step());
    note = absl::StrCat("resuming from step ", job.job.initialized_from().step(),
                        ", as ", InitializedFromNote(job.job.initialized_from()));
  } else {
    note = "from step 0";
  }
  if (!skipped.empty()) {
    absl::StrAppend(&note, " (", absl::StrJoin(skipped, "; "), ")");
  }
  return note;
}

absl::StatusOr<v1::ReportCheckpointResponse> Coordinator::ReportCheckpoint(
    const v1::ReportCheckpointRequest& req) {
  if (req.error().size() > static_cast<size_t>(options_.max_reason_length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("error: at most ", options_.max_reason_length,
                     " characters, got ", req.error().size()));
  }
  v1::ReportCheckpointResponse resp;
  std::optional<checkpoint::Manifest> to_commit;
  std::string root;
  int keep_last = 0;
  {
    Locked lock(this);
    ASSIGN_OR_RETURN(JobRec * j, jobs_.Get(req.job_id()));
    if (!j->job.spec().has_checkpoint()) {
      return absl::FailedPreconditionError(
          absl::StrCat(j->job.id(), " has no checkpoint spec"));
    }
    if (!IsActive(j->job.state()) || req.epoch() != j->job.epoch()) {
      return resp;  // the epoch is over; its shards are orphans
    }
    RETURN_IF_ERROR(JobTable::CheckRank(*j, req.rank(), req.worker_id()));
    Acknowledge(*j, req.rank());
    const int world = static_cast<int>(j->ranks.size());
    ASSIGN_OR_RETURN(const std::string fingerprint,
                     checkpoint::SpecFingerprint(j->job.spec()));
    ASSIGN_OR_RETURN(const CheckpointTracker::Outcome outcome,
                     j->checkpoints.Add(req, world, fingerprint));
    root = j->job.spec().checkpoint().dir();
    keep_last = j->job.spec().checkpoint().keep_last();
    v1::CheckpointRecord* record =
        FindRecord(j->job, req.step(), j->job.epoch());
    // The tracker forgets a failed step once it is recorded, so another
    // rank's failure of it is new to the tracker but not to the record.
    const bool failed_before =
        record != nullptr && record->state() == v1::CheckpointRecord::FAILED;
    if (record == nullptr && outcome != CheckpointTracker::Outcome::kIgnored) {
      record = j->job.add_checkpoints();
      record->set_step(req.step());
      record->set_state(v1::CheckpointRecord::WRITING);
      record->set_path(checkpoint::StepDirectory(root, req.step()));
      record->set_world_size(world);
      record->set_epoch(j->job.epoch());
      *record->mutable_time() = ToProto(clock_->Now());
    }
    switch (outcome) {
      case CheckpointTracker::Outcome::kPending:
      case CheckpointTracker::Outcome::kIgnored:
        break;
      case CheckpointTracker::Outcome::kFailed: {
        if (failed_before) {  // one FAILED record and event per step
          j->checkpoints.Forget(req.step());
          break;
        }
        record->set_state(v1::CheckpointRecord::FAILED);
        record->set_reason(absl::StrCat(JobTable::Who(*j, req.rank()),
                                        " could not write its shard: ",
                                        Clip(req.error())));
        *record->mutable_time() = ToProto(clock_->Now());
        v1::JobEvent event;
        *event.mutable_checkpoint() = *record;
        AppendEvent(*j, std::move(event));
        j->checkpoints.Forget(req.step());
        break;
      }
      case CheckpointTracker::Outcome::kComplete:
        to_commit = *j->checkpoints.manifest(req.step());
        j->checkpoints.Forget(req.step());
        break;
    }
    if (record != nullptr) resp.set_state(record->state());
    PersistJob(*j);
    RETURN_IF_ERROR(lock.Commit());
  }
  if (!to_commit.has_value()) return resp;

  // The commit point, off the lock: the manifest, then pruning (which
  // verifies the checkpoints it keeps, reading every shard).
  const int64_t epoch = req.epoch();
  absl::Status written = checkpoint::WriteManifest(root, *to_commit);
  std::vector<std::string> pruned;
  std::string prune_error;
  if (written.ok() && keep_last > 0) {
    absl::StatusOr<std::vector<std::string>> removed =
        checkpoint::Prune(root, keep_last);
    if (removed.ok()) {
      pruned = *std::move(removed);
    } else {
      prune_error = std::string(removed.status().message());
    }
  }
  int64_t size_bytes = 0;
  for (const checkpoint::ShardFileInfo& f : to_commit->files) {
    size_bytes += f.size_bytes;
  }
  Locked lock(this);
  JobRec* j = jobs_.Find(req.job_id());
  if (j == nullptr) return resp;
  v1::CheckpointRecord* record = FindRecord(j->job, to_commit->step, epoch);
  if (record != nullptr) {
    *record->mutable_time() = ToProto(clock_->Now());
    if (written.ok()) {
      record->set_state(v1::CheckpointRecord::COMPLETE);
      record->set_size_bytes(size_bytes);
      if (!prune_error.empty()) {
        record->set_reason(absl::StrCat("pruning failed: ", Clip(prune_error)));
      }
    } else {
      record->set_state(v1::CheckpointRecord::FAILED);
      record->set_reason(absl::StrCat("writing the manifest failed: ",
                                      Clip(written.message())));
    }
    resp.set_state(record->state());
    v1::JobEvent event;
    *event.mutable_checkpoint() = *record;
    AppendEvent(*j, std::move(event));
  }
  TrimRecords(j->job, pruned);
  PersistJob(*j);
  RETURN_IF_ERROR(lock.Commit());
  return resp;
}

}  // namespace coordinator
}  // namespace pshard
