// The Coordinator's rendezvous and layout methods: the job's key/value
// store, the layout reports that make up its layout barrier, and the
// publication of the shard assignment.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/ids.h"
#include "coordinator/locked_section.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"

namespace pshard {
namespace coordinator {

// ---- Rendezvous ----

absl::Status Coordinator::KvPut(const v1::KvPutRequest& req) {
  RETURN_IF_ERROR(RendezvousStore::CheckKey(req.key(), kv_limits_));
  RETURN_IF_ERROR(RendezvousStore::CheckValue(req.value(), kv_limits_));
  Locked lock(this);
  ASSIGN_OR_RETURN(JobRec * j, jobs_.ActiveAt(req.job_id(), req.epoch()));
  ASSIGN_OR_RETURN(std::vector<WaitId> woken,
                   j->kv.Put(j->job.id(), req.key(), req.value(), kv_limits_,
                             kv_bytes_total_));
  for (WaitId id : woken) {
    KvWait* w = waits_.Find<KvWait>(id);
    if (w == nullptr) continue;
    if (!j->kv.Advance(w->read, kv_limits_)) {
      // Still missing a later key: the same wait moves on to it.
      j->kv.AddWaiter(w->read.keys[w->read.present], id);
      continue;
    }
    std::optional<KvWait> done = waits_.Take<KvWait>(id);
    DeferAnswer(std::move(done->done), j->kv.Values(done->read, kv_limits_));
  }
  return absl::OkStatus();
}

Coordinator::WaitId Coordinator::KvGet(absl::string_view job_id,
                                       int64_t epoch, absl::string_view key,
                                       absl::Time deadline, KvCallback done) {
  return KvGetMany(
      job_id, epoch, {std::string(key)}, deadline,
      [done = std::move(done)](
          absl::StatusOr<std::vector<KvValue>> values) {
        if (!values.ok()) {
          done(values.status());
        } else {
          done(*values->front());
        }
      });
}

Coordinator::WaitId Coordinator::KvGetMany(absl::string_view job_id,
                                           int64_t epoch,
                                           std::vector<std::string> keys,
                                           absl::Time deadline,
                                           KvValuesCallback done) {
  Locked lock(this);
  // KvGet's errors name "key", as its request's field is called.
  absl::Status bad = keys.size() == 1
                         ? RendezvousStore::CheckKey(keys[0], kv_limits_)
                         : RendezvousStore::CheckKeys(keys, kv_limits_);
  absl::StatusOr<JobRec*> j = jobs_.ActiveAt(job_id, epoch);
  if (bad.ok() && !j.ok()) bad = j.status();
  if (!bad.ok()) {
    DeferAnswer(std::move(done), bad);
    return 0;
  }
  KvRead read{std::move(keys)};
  if ((*j)->kv.Advance(read, kv_limits_)) {
    DeferAnswer(std::move(done), (*j)->kv.Values(read, kv_limits_));
    return 0;
  }
  if (clock_->Now() >= deadline) {
    DeferAnswer(std::move(done), KvReadMissing(read));
    return 0;
  }
  if (absl::Status cap = waits_.CheckCapacity(); !cap.ok()) {
    DeferAnswer(std::move(done), cap);
    return 0;
  }
  const std::string missing = read.keys[read.present];
  const WaitId id =
      Park(KvWait{(*j)->num, epoch, std::move(read), std::move(done)},
           deadline);
  (*j)->kv.AddWaiter(missing, id);
  return id;
}

// ---- Buckets and assignment ----

absl::StatusOr<v1::ReportBucketsResponse> Coordinator::ReportBuckets(
    const v1::ReportBucketsRequest& req) {
  LayoutReport report;
  report.job_id = req.job_id();
  report.epoch = req.epoch();
  report.rank = req.rank();
  report.worker_id = req.worker_id();
  report.layout = EncodedLayout::FromBuckets(req.buckets());
  report.fingerprint = req.layout_fingerprint();
  Locked lock(this);
  // A deadline in the past: an unknown fingerprint is answered at once.
  bool needs_commit = false;
  std::optional<absl::StatusOr<v1::ReportBucketsResponse>> answer =
      ReportBucketsLocked(report, absl::InfinitePast(), nullptr, nullptr,
                          &needs_commit);
  if (needs_commit) RETURN_IF_ERROR(lock.Commit());
  return *std::move(answer);
}

Coordinator::WaitId Coordinator::ReportLayout(const LayoutReport& report,
                                             absl::Time deadline,
                                             ReportCallback done) {
  std::optional<absl::StatusOr<v1::ReportBucketsResponse>> answer;
  {
    Locked lock(this);
    WaitId id = 0;
    bool needs_commit = false;
    answer = ReportBucketsLocked(report, deadline, &id, &done, &needs_commit);
    if (!answer.has_value()) return id;
    if (needs_commit) {
      if (absl::Status s = lock.Commit(); !s.ok()) answer = s;
    }
  }
  // Answered here, not deferred: the report that completes the set would
  // otherwise be answered after the thousands of assignment callbacks it
  // released (on the notifier thread).
  done(*std::move(answer));
  return 0;
}

std::optional<absl::StatusOr<v1::ReportBucketsResponse>>
Coordinator::ReportBucketsLocked(const LayoutReport& report,
                                 absl::Time deadline, WaitId* parked,
                                 ReportCallback* done, bool* needs_commit) {
  const int64_t epoch = report.epoch;
  const int rank = report.rank;
  const std::string& fingerprint = report.fingerprint;
  const bool by_fingerprint = report.layout.empty() && !fingerprint.empty();
  if (by_fingerprint && fingerprint.size() != shard::kLayoutFingerprintBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout_fingerprint: must be ", shard::kLayoutFingerprintBytes,
                     " bytes (SHA-256), got ", fingerprint.size()));
  }
  absl::StatusOr<JobRec*> found = jobs_.ActiveAt(report.job_id, epoch);
  if (!found.ok()) return found.status();
  JobRec* j = *found;
  if (absl::Status s = JobTable::CheckRank(*j, rank, report.worker_id); !s.ok()) {
    return s;
  }
  Acknowledge(*j, rank);
  v1::ReportBucketsResponse resp;
  auto fail = [&](const std::string& reason) -> absl::Status {
    EndJob(*j, v1::FAILED, reason);
    Schedule();
    *needs_commit = true;
    return absl::InvalidArgumentError(reason);
  };
  if (!j->layout.MatchesReference(report.layout, fingerprint,
                                  by_fingerprint)) {
    if (!j->layout.has_reference() && j->job.state() == v1::RUNNING) {
      // Recovered after a restart: the layout was checked before, and the
      // published assignment stands.
      return resp;
    }
    if (by_fingerprint) {
      // Nothing is recorded (the Acknowledge above needs no commit). Before
      // any rank has sent the layout in full, wait for one to do so, so
      // that ranks reporting at the same moment do not all have to send it;
      // otherwise this rank's layout differs and must be seen in full.
      if (!j->layout.has_reference() && clock_->Now() < deadline &&
          parked != nullptr && done != nullptr && waits_.CheckCapacity().ok()) {
        *parked = Park(LayoutWait{j->num, epoch, rank, std::string(fingerprint),
                                  std::move(*done)},
                       deadline);
        j->layout.AddWaiter(*parked);
        return std::nullopt;
      }
      resp.set_send_layout(true);
      return resp;
    }
    absl::StatusOr<bool> became_reference = j->layout.Accept(
        report.layout, rank, JobTable::Who(*j, rank), options_.layout_limits);
    if (!became_reference.ok()) {
      return fail(std::string(became_reference.status().message()));
    }
    if (*became_reference) AnswerLayoutWaiters(*j);
  }
  j->layout.MarkReported(rank);
  if (j->job.state() == v1::STARTING && j->layout.complete()) {
    PublishAssignment(*j);
    Schedule();
  }
  *needs_commit = true;
  return resp;
}

void Coordinator::AnswerLayoutWaiters(JobRec& job) {
  for (WaitId id : job.layout.TakeWaiters()) {
    std::optional<LayoutWait> w = waits_.Take<LayoutWait>(id);
    if (!w) continue;
    v1::ReportBucketsResponse resp;
    if (!job.layout.AcceptFingerprint(w->rank, w->fingerprint)) {
      resp.set_send_layout(true);
    }
    DeferAnswer(std::move(w->done), resp);
  }
}

void Coordinator::PublishAssignment(JobRec& job) {
  absl::StatusOr<v1::ShardAssignment> a = shard::BuildShardAssignment(
      job.job.id(), job.job.epoch(), job.job.spec().assignment_policy(),
      job.layout.reference(), job.job.members());
  if (!a.ok()) {
    EndJob(job, v1::FAILED,
           absl::StrCat("cannot compute the assignment: ", a.status().message()));
    return;
  }
  job.assignment = std::make_shared<const v1::ShardAssignment>(*std::move(a));
  job.assignment_owners =
      std::make_shared<const v1::ShardAssignment>(shard::OwnersView(*job.assignment));
  pending_->assignments.emplace_back(job.num, *job.assignment);
  Transition(job, v1::RUNNING,
             absl::StrFormat("assignment published: epoch %d, %d buckets, "
                             "policy %s, imbalance %.4f",
                             job.job.epoch(), job.assignment->buckets_size(),
                             v1::JobSpec::AssignmentPolicy_Name(
                                 job.assignment->policy()),
                             job.assignment->imbalance()));
  for (WaitId id : job.assignment_waiters) {
    std::optional<AssignmentWait> w = waits_.Take<AssignmentWait>(id);
    if (!w) continue;
    AssignmentPtr a = w->owners_view ? job.assignment_owners : job.assignment;
    DeferAnswer(std::move(w->done), std::move(a));
  }
  job.assignment_waiters.clear();
}

Coordinator::WaitId Coordinator::GetAssignment(absl::string_view job_id,
                                               int64_t epoch,
                                               v1::AssignmentView view,
                                               absl::Time deadline,
                                               AssignmentCallback done) {
  Locked lock(this);
  absl::StatusOr<AssignmentPtr> immediate;
  const bool owners_view = view == v1::ASSIGNMENT_VIEW_OWNERS;
  JobRec* j = jobs_.Find(job_id);
  if (!v1::AssignmentView_IsValid(view)) {
    immediate = absl::InvalidArgumentError(
        absl::StrCat("view: unknown assignment view ", static_cast<int>(view)));
  } else if (j == nullptr) {
    immediate = absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  } else if (epoch != j->job.epoch()) {
    immediate = absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), ": epoch ", epoch, " is ",
        epoch < j->job.epoch() ? "stale" : "unknown", "; current epoch is ",
        j->job.epoch()));
  } else if (j->assignment && j->assignment->epoch() == epoch) {
    immediate = owners_view ? j->assignment_owners : j->assignment;
  } else if (!IsActive(j->job.state())) {
    immediate = absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), " is ", v1::JobState_Name(j->job.state()),
        " and has no assignment for epoch ", epoch));
  } else if (clock_->Now() >= deadline) {
    immediate = absl::DeadlineExceededError(
        absl::StrCat(j->job.id(), ": assignment for epoch ", epoch,
                     " not published before the deadline (",
                     j->layout.reported(), " of ", j->ranks.size(),
                     " ranks reported their layout)"));
  } else if (absl::Status cap = waits_.CheckCapacity(); !cap.ok()) {
    immediate = cap;
  } else {
    const WaitId id =
        Park(AssignmentWait{j->num, epoch, owners_view, std::move(done)},
             deadline);
    j->assignment_waiters.push_back(id);
    return id;
  }
  DeferAnswer(std::move(done), std::move(immediate));
  return 0;
}

absl::StatusOr<v1::ShardAssignment> Coordinator::GetShardAssignment(
    absl::string_view job_id) const {
  Locked lock(this);
  ASSIGN_OR_RETURN(const JobRec* j, jobs_.Get(job_id));
  if (!j->assignment) {
    return absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), " has no assignment yet (",
        v1::JobState_Name(j->job.state()),
        j->job.state() == v1::STARTING
            ? absl::StrCat(", ", j->layout.reported(), " of ", j->ranks.size(),
                           " ranks reported their bucket layout")
            : "",
        ")"));
  }
  return *j->assignment;
}


}  // namespace coordinator
}  // namespace pshard
