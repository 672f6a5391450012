#include "coordinator/job_table.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "absl/strings/str_join.h"
#include "common/job_state.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "coordinator/ids.h"
#include "coordinator/restart_policy.h"

namespace pshard {
namespace coordinator {

namespace {

constexpr size_t kMaxRequestIdLength = 128;

bool IsRequestIdChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
         c == '-';
}

// The spec as Add stores it, for comparing a retry's with the first's.
v1::JobSpec AsStored(v1::JobSpec spec) {
  spec.DiscardUnknownFields();
  return spec;
}

}  // namespace

absl::Status JobTable::ValidateRequestId(absl::string_view request_id) {
  if (request_id.size() <= kMaxRequestIdLength &&
      std::all_of(request_id.begin(), request_id.end(), IsRequestIdChar)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "request_id: must be at most ", kMaxRequestIdLength,
      " characters of [A-Za-z0-9._:-], got \"", Clip(request_id, 64), "\"",
      request_id.size() > kMaxRequestIdLength
          ? absl::StrCat(" (", request_id.size(), " characters)")
          : std::string()));
}

absl::StatusOr<const JobRec*> JobTable::FindSubmission(
    absl::string_view request_id, const v1::JobSpec& spec) const {
  auto it = by_request_id_.find(request_id);
  if (it == by_request_id_.end()) return nullptr;
  const JobRec* j = jobs_.at(it->second).get();
  // Field by field, not by serialized bytes: proto serialization is not
  // canonical across versions, and the stored spec went through a restart.
  if (!google::protobuf::util::MessageDifferencer::Equals(j->job.spec(),
                                                          AsStored(spec))) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id ", request_id, " was used for job ",
                     j->job.id(), " with a different spec"));
  }
  return j;
}

absl::StatusOr<JobRec*> JobTable::Add(v1::JobSpec spec, absl::Time now,
                                      std::string request_id) {
  if (static_cast<int>(jobs_.size()) >= limits_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many jobs kept (", limits_.max_jobs, ")"));
  }
  if (static_cast<int>(queued_.size() + active_.size()) >=
      limits_.max_unfinished_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many unfinished jobs (", limits_.max_unfinished_jobs,
                     "); wait for some to end"));
  }
  auto j = std::make_unique<JobRec>();
  j->num = ++next_num_;
  j->job.set_id(JobId(j->num));
  *j->job.mutable_spec() = std::move(spec);
  // Unknown fields would be stored and echoed to every rank: drop them.
  j->job.mutable_spec()->DiscardUnknownFields();
  j->job.set_state(v1::JOB_STATE_UNSPECIFIED);
  *j->job.mutable_submit_time() = ToProto(now);
  j->job.mutable_progress()->set_total_steps(j->job.spec().steps());
  if (!request_id.empty()) {
    by_request_id_[request_id] = j->num;
    j->job.set_request_id(std::move(request_id));
  }
  JobRec* out = j.get();
  jobs_[j->num] = std::move(j);
  return out;
}

JobRec& JobTable::Restore(int64_t num, v1::Job job) {
  auto j = std::make_unique<JobRec>();
  j->num = num;
  j->job = std::move(job);
  next_num_ = std::max(next_num_, num);
  const v1::JobState state = j->job.state();
  // When it was last queued is not stored: a job restored QUEUED counts as
  // waiting since its submission.
  if (state == v1::QUEUED) {
    j->queued_since = FromProto(j->job.submit_time());
    queued_.insert(KeyOf(*j));
  }
  if (IsActive(state)) active_.insert(num);
  if (!j->job.request_id().empty()) by_request_id_[j->job.request_id()] = num;
  JobRec& out = *j;
  jobs_[num] = std::move(j);
  return out;
}

std::unique_ptr<JobRec> JobTable::Remove(int64_t num) {
  auto it = jobs_.find(num);
  if (it == jobs_.end()) return nullptr;
  Dequeue(num);
  std::unique_ptr<JobRec> out = std::move(it->second);
  jobs_.erase(it);
  auto by_id = by_request_id_.find(out->job.request_id());
  if (by_id != by_request_id_.end() && by_id->second == num) {
    by_request_id_.erase(by_id);
  }
  active_.erase(num);
  return out;
}

void JobTable::MarkQueued(int64_t num, absl::Time now) {
  JobRec& j = *jobs_.at(num);
  j.queued_since = now;
  queued_.insert(KeyOf(j));
}

void JobTable::Dequeue(int64_t num) {
  auto it = jobs_.find(num);
  if (it != jobs_.end()) queued_.erase(KeyOf(*it->second));
}

JobRec* JobTable::Find(int64_t num) {
  auto it = jobs_.find(num);
  return it == jobs_.end() ? nullptr : it->second.get();
}

JobRec* JobTable::Find(absl::string_view job_id) {
  std::optional<int64_t> num = ParseJobId(job_id);
  return num ? Find(*num) : nullptr;
}

const JobRec* JobTable::Find(absl::string_view job_id) const {
  return const_cast<JobTable*>(this)->Find(job_id);
}

absl::StatusOr<JobRec*> JobTable::Get(absl::string_view job_id) {
  JobRec* j = Find(job_id);
  if (j == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", Clip(job_id, 64)));
  }
  return j;
}

absl::StatusOr<const JobRec*> JobTable::Get(absl::string_view job_id) const {
  return const_cast<JobTable*>(this)->Get(job_id);
}

absl::StatusOr<JobRec*> JobTable::ActiveAt(absl::string_view job_id,
                                           int64_t epoch) {
  ASSIGN_OR_RETURN(JobRec * j, Get(job_id));
  if (!IsActive(j->job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat(j->job.id(), " is not active (",
                     v1::JobState_Name(j->job.state()), ")"));
  }
  if (epoch != j->job.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        j->job.id(), ": epoch ", epoch, " is ",
        epoch < j->job.epoch() ? "stale" : "unknown", "; current epoch is ",
        j->job.epoch()));
  }
  return j;
}

absl::Status JobTable::CheckRank(const JobRec& job, int rank,
                                 absl::string_view worker_id) {
  if (rank < 0 || rank >= static_cast<int>(job.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " is out of range for ", job.job.id(),
                     " (world size ", job.ranks.size(), ")"));
  }
  const std::string& holder = job.job.members(rank).worker_id();
  if (worker_id != holder) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: rank ", rank, " of ", job.job.id(),
                     " is held by ", holder, ", not ", Clip(worker_id, 64)));
  }
  return absl::OkStatus();
}

std::string JobTable::Who(const JobRec& job, int rank) {
  return absl::StrCat("rank ", rank, " (worker ",
                      job.job.members(rank).worker_id(), ")");
}

v1::JobEvent JobTable::Transition(v1::Job& job, v1::JobState to,
                                  std::string reason, absl::Time now) {
  const v1::JobState from = job.state();
  job.set_state(to);
  job.set_reason(reason);
  // A job queued again to wait for a restart keeps its first start time.
  if (from == v1::QUEUED && to != v1::QUEUED && !job.has_start_time()) {
    *job.mutable_start_time() = ToProto(now);
  }
  if (IsTerminal(to)) *job.mutable_end_time() = ToProto(now);
  v1::JobEvent event;
  auto* change = event.mutable_state_change();
  change->set_from(from);
  change->set_to(to);
  change->set_reason(std::move(reason));
  return event;
}

std::optional<JobTable::Placement> JobTable::PlaceNext(
    absl::FunctionRef<std::vector<IdleWorker>(const JobRec& job)> idle,
    int64_t pool, absl::Time now, absl::Duration reservation_after) {
  // The idle workers of every job that is not restarting: the same list,
  // asked for once.
  std::optional<std::vector<IdleWorker>> common;
  bool head_seen = false;
  for (const QueueKey& key : queued_) {
    JobRec* j = jobs_.at(key.second).get();
    const v1::JobSpec& spec = j->job.spec();
    const bool restarting = j->job.restarts() > 0;
    const int need = restarting ? MinRestartWorld(spec) : spec.world_size();
    // It could not start even on an empty cluster: waiting for it would
    // block everyone behind it for nothing.
    if (need > pool) continue;
    std::vector<IdleWorker> own;
    const std::vector<IdleWorker>* free = nullptr;
    if (restarting) {
      own = idle(*j);
      free = &own;
    } else {
      if (!common.has_value()) common = idle(*j);
      free = &*common;
    }
    // The count first: PlaceRanks copies and sorts the list.
    if (static_cast<int64_t>(free->size()) >= need) {
      std::vector<int64_t> placed =
          restarting
              ? PlaceRestart(*free, {}, spec.world_size(), need)
              : PlaceRanks(*free, spec.world_size());
      if (!placed.empty()) return Placement{j, std::move(placed)};
    }
    if (!head_seen) {
      // The head: later jobs backfill only until it has waited long
      // enough (see "Scheduling" in job_table.h). A restarting head
      // reserves at once: it was running, its survivors are about to be
      // idle for it, and a backfill would make it wait for a whole job.
      head_seen = true;
      if (restarting || now - j->queued_since >= reservation_after) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

std::vector<JobRec*> JobTable::RefreshQueuedReasons(int64_t pool) {
  std::vector<JobRec*> changed;
  if (pool == reasons_pool_) return changed;
  reasons_pool_ = pool;
  for (const QueueKey& key : queued_) {
    JobRec& j = *jobs_.at(key.second);
    std::string reason =
        QueuedReason(QueuedReasonPrefix(j.job.reason()), j.job.spec(),
                     j.job.restarts() > 0, pool);
    if (reason == j.job.reason()) continue;
    j.job.set_reason(std::move(reason));
    changed.push_back(&j);
  }
  return changed;
}

absl::StatusOr<JobPage> JobTable::List(const std::vector<v1::JobState>& states,
                                       int page_size,
                                       absl::string_view page_token,
                                       int64_t max_bytes) const {
  ASSIGN_OR_RETURN(const int size, ResolvePageSize(page_size, kPages));
  for (v1::JobState s : states) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("states: unknown job state ", static_cast<int>(s)));
    }
  }
  std::vector<int> wanted(states.begin(), states.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const std::string filter = absl::StrCat("states=", absl::StrJoin(wanted, ","));
  // Newest first: the next page starts below the last job listed.
  int64_t before = INT64_MAX;
  if (!page_token.empty()) {
    ASSIGN_OR_RETURN(before, DecodePageToken(page_token, "jobs", filter));
  }
  JobPage page;
  int64_t last = before;
  int64_t bytes = 0;
  for (auto it = std::make_reverse_iterator(jobs_.lower_bound(before));
       it != jobs_.rend(); ++it) {
    const v1::Job& job = it->second->job;
    if (!wanted.empty() &&
        !std::binary_search(wanted.begin(), wanted.end(), job.state())) {
      continue;
    }
    bytes += static_cast<int64_t>(job.ByteSizeLong()) + 8;
    if (static_cast<int>(page.jobs.size()) == size ||
        (bytes > max_bytes && !page.jobs.empty())) {
      page.next_page_token = EncodePageToken("jobs", filter, last);
      break;
    }
    page.jobs.push_back(job);
    last = it->first;
  }
  return page;
}

void SetLocalRanks(JobRec& job) {
  std::vector<std::string> hosts(job.ranks.size());
  for (const v1::JobMember& m : job.job.members()) {
    if (m.rank() >= 0 && m.rank() < static_cast<int>(hosts.size())) {
      hosts[m.rank()] = m.host();
    }
  }
  const std::vector<LocalRank> local = LocalRanks(hosts);
  for (size_t r = 0; r < job.ranks.size(); ++r) job.ranks[r].local = local[r];
}

}  // namespace coordinator
}  // namespace pshard
