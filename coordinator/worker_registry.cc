#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "coordinator/ids.h"

namespace pshard {
namespace coordinator {
namespace {

bool ValidWorkerName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status ValidateIncarnation(absl::string_view incarnation) {
  if (incarnation.empty() || incarnation.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("incarnation: must be 1..64 characters, got ",
                     incarnation.size()));
  }
  return absl::OkStatus();
}

}  // namespace

void WorkerRec::Assign(int64_t job, int64_t job_epoch, int job_rank) {
  job_num = job;
  epoch = job_epoch;
  rank = job_rank;
  acknowledged = false;
  run_job_sends = 0;
  missing_reports = 0;
  reports_assignment = false;
}

void WorkerRec::Release() {
  Assign(0, 0, -1);
}

absl::Status WorkerRegistry::ValidateRegistration(
    const v1::RegisterWorkerRequest& req) {
  if (!ValidWorkerName(req.name())) {
    return absl::InvalidArgumentError(
        "name: must be 1..253 characters of [A-Za-z0-9._:-]");
  }
  RETURN_IF_ERROR(ValidateIncarnation(req.incarnation()));
  if (req.address().size() > 261) {
    return absl::InvalidArgumentError("address: at most 261 characters");
  }
  if (req.host().size() > 253) {
    return absl::InvalidArgumentError("host: at most 253 characters");
  }
  if (req.device().size() > 256) {
    return absl::InvalidArgumentError("device: at most 256 characters");
  }
  if (!v1::DeviceKind_IsValid(req.device_kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_kind: unknown value ", req.device_kind()));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::ValidateAttachment(const v1::AttachRequest& req) {
  if (req.worker_id().empty()) {
    return absl::InvalidArgumentError("worker_id: missing");
  }
  if (!ParseWorkerId(req.worker_id()).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: not a worker id (w-<n>): ",
                     Clip(req.worker_id(), 64)));
  }
  return ValidateIncarnation(req.incarnation());
}

WorkerRec* WorkerRegistry::FindByName(absl::string_view name) {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : workers_.at(it->second).get();
}

const WorkerRec* WorkerRegistry::FindByName(absl::string_view name) const {
  return const_cast<WorkerRegistry*>(this)->FindByName(name);
}

absl::StatusOr<WorkerRec*> WorkerRegistry::Add(absl::string_view name,
                                               absl::Time now) {
  if (static_cast<int>(workers_.size()) >= options_.max_workers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker registry full (", options_.max_workers, ")"));
  }
  auto rec = std::make_unique<WorkerRec>();
  rec->num = ++next_num_;
  rec->info.set_id(WorkerId(rec->num));
  rec->info.set_name(std::string(name));
  *rec->info.mutable_registered_time() = ToProto(now);
  WorkerRec* w = rec.get();
  by_name_[name] = rec->num;
  workers_[rec->num] = std::move(rec);
  return w;
}

void WorkerRegistry::Register(WorkerRec& w,
                              const v1::RegisterWorkerRequest& req,
                              absl::Time now) {
  w.info.set_incarnation(req.incarnation());
  w.info.set_address(req.address());
  w.info.set_host(req.host());
  w.info.set_device_kind(req.device_kind());
  w.info.set_device(req.device());
  w.lost = false;
  w.confirmed = true;
  w.last_heartbeat = now;
  w.attachment_id = 0;
  next_loss_check_ = std::min(next_loss_check_, now + options_.worker_timeout);
}

int64_t WorkerRegistry::Attach(WorkerRec& w) {
  w.attachment_id = ++last_attachment_id_;
  return w.attachment_id;
}

WorkerRec& WorkerRegistry::Restore(int64_t num, v1::WorkerInfo info,
                                   absl::Time now) {
  auto w = std::make_unique<WorkerRec>();
  w->num = num;
  w->info = std::move(info);
  w->last_heartbeat = now;
  by_name_[w->info.name()] = num;
  next_num_ = std::max(next_num_, num);
  WorkerRec& out = *w;
  workers_[num] = std::move(w);
  return out;
}

void WorkerRegistry::Remove(int64_t num) {
  auto it = workers_.find(num);
  if (it == workers_.end()) return;
  auto name = by_name_.find(it->second->info.name());
  if (name != by_name_.end() && name->second == num) by_name_.erase(name);
  workers_.erase(it);
}

WorkerRec* WorkerRegistry::Find(int64_t num) {
  auto it = workers_.find(num);
  return it == workers_.end() ? nullptr : it->second.get();
}

const WorkerRec* WorkerRegistry::Find(int64_t num) const {
  auto it = workers_.find(num);
  return it == workers_.end() ? nullptr : it->second.get();
}

WorkerRec* WorkerRegistry::Find(absl::string_view worker_id) {
  std::optional<int64_t> num = ParseWorkerId(worker_id);
  return num ? Find(*num) : nullptr;
}

const WorkerRec* WorkerRegistry::Find(absl::string_view worker_id) const {
  return const_cast<WorkerRegistry*>(this)->Find(worker_id);
}

absl::StatusOr<WorkerRec*> WorkerRegistry::Resolve(absl::string_view worker) {
  if (WorkerRec* w = Find(worker)) return w;
  if (WorkerRec* w = FindByName(worker)) return w;
  return absl::NotFoundError(absl::StrCat(
      "no worker \"", Clip(worker, 253), "\" (neither a worker id nor a name)"));
}

absl::StatusOr<const WorkerRec*> WorkerRegistry::Resolve(
    absl::string_view worker) const {
  return const_cast<WorkerRegistry*>(this)->Resolve(worker);
}

void WorkerRegistry::NoteWhatItRuns(WorkerRec& w,
                                    const v1::HeartbeatRequest& req) {
  const bool runs_a_job = !req.job_id().empty() && req.state() != v1::IDLE;
  const bool runs_its_rank = runs_a_job && w.job_num != 0 &&
                             req.job_id() == JobId(w.job_num) &&
                             req.epoch() == w.epoch;
  if (!runs_a_job || runs_its_rank) {
    w.releasing.reset();
  } else if (!w.IsReleasing(req.job_id(), req.epoch())) {
    w.releasing = WorkerRec::Releasing{Clip(req.job_id(), 64), req.epoch(), -1};
  }
}

v1::WorkerState WorkerRegistry::StateOf(const WorkerRec& w) {
  if (w.lost) return v1::LOST;
  if (w.info.drain_requested()) return v1::DRAINING;
  if (w.job_num != 0) return v1::BUSY;
  if (w.releasing.has_value()) return v1::RELEASING;
  return v1::IDLE;
}

v1::WorkerInfo WorkerRegistry::InfoOf(const WorkerRec& w, absl::Time now) {
  v1::WorkerInfo info = w.info;
  info.set_state(StateOf(w));
  if (w.job_num != 0) {
    info.set_job_id(JobId(w.job_num));
    info.set_rank(w.rank);
  } else if (w.releasing.has_value() && !w.lost) {
    // The job it is finishing (so that `drain --wait` waits for it too).
    info.set_job_id(w.releasing->job_id);
    info.set_rank(w.releasing->rank);
  } else {
    info.set_rank(-1);
  }
  *info.mutable_heartbeat_age() =
      ToProto(std::max(absl::ZeroDuration(), now - w.last_heartbeat));
  return info;
}

bool WorkerRegistry::Schedulable(const WorkerRec& w, absl::Time now) const {
  return !w.releasing.has_value() && FreeOnceReleased(w, now);
}

bool WorkerRegistry::FreeOnceReleased(const WorkerRec& w,
                                      absl::Time now) const {
  return w.confirmed && !w.lost && !w.info.drain_requested() &&
         w.job_num == 0 &&
         now - w.last_heartbeat <= options_.schedulable_heartbeat_age;
}

std::vector<IdleWorker> WorkerRegistry::Idle(
    absl::Time now, absl::string_view finishing_job_id) const {
  std::vector<IdleWorker> idle;
  for (const auto& [num, w] : workers_) {
    const bool finishing_that_job = !finishing_job_id.empty() &&
                                    w->releasing.has_value() &&
                                    w->releasing->job_id == finishing_job_id;
    if (finishing_that_job ? FreeOnceReleased(*w, now) : Schedulable(*w, now)) {
      idle.push_back({num, w->info.host()});
    }
  }
  return idle;
}

int64_t WorkerRegistry::Available() const {
  int64_t n = 0;
  for (const auto& [num, w] : workers_) {
    if (!w->lost && !w->info.drain_requested()) ++n;
  }
  return n;
}

std::vector<WorkerRegistry::Loss> WorkerRegistry::DueLosses(absl::Time now) {
  std::vector<Loss> lost;
  if (now < next_loss_check_) return lost;
  next_loss_check_ = absl::InfiniteFuture();
  for (auto& [num, w] : workers_) {
    if (w->lost) continue;
    absl::Time limit = w->last_heartbeat + options_.worker_timeout;
    if (!w->confirmed) {
      limit = std::max(limit, started_ + options_.recovery_grace);
    }
    if (now > limit) {
      lost.push_back(
          {w.get(),
           w->confirmed
               ? absl::StrCat("no heartbeat for ",
                              absl::FormatDuration(now - w->last_heartbeat))
               : absl::StrCat("not back within ",
                              absl::FormatDuration(options_.recovery_grace),
                              " of a coordinator restart")});
    } else {
      next_loss_check_ = std::min(next_loss_check_, limit);
    }
  }
  return lost;
}

absl::StatusOr<WorkerPage> WorkerRegistry::List(bool include_lost,
                                                int page_size,
                                                absl::string_view page_token,
                                                absl::Time now) const {
  ASSIGN_OR_RETURN(const int size, ResolvePageSize(page_size, kPages));
  const std::string filter = include_lost ? "lost=1" : "lost=0";
  int64_t after = 0;
  if (!page_token.empty()) {
    ASSIGN_OR_RETURN(after, DecodePageToken(page_token, "workers", filter));
  }
  WorkerPage page;
  int64_t last = after;
  for (auto it = workers_.upper_bound(after); it != workers_.end(); ++it) {
    const WorkerRec& w = *it->second;
    if (w.lost && !include_lost) continue;
    if (static_cast<int>(page.workers.size()) == size) {
      // There is more: the next page starts after the last one listed.
      page.next_page_token = EncodePageToken("workers", filter, last);
      break;
    }
    page.workers.push_back(InfoOf(w, now));
    last = it->first;
  }
  return page;
}

}  // namespace coordinator
}  // namespace pshard
