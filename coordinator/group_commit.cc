#include "coordinator/group_commit.h"

#include <iterator>

namespace pshard {
namespace coordinator {

GroupCommit::Ticket GroupCommit::Seal(StateStore::Batch batch) {
  if (batch.empty()) return 0;
  absl::MutexLock lock(&mu_);
  const Ticket mine = ++sealed_seq_;
  sealed_.emplace_back(mine, std::move(batch));
  return mine;
}

GroupCommit::Ticket GroupCommit::LastSealed() const {
  absl::MutexLock lock(&mu_);
  return sealed_seq_;
}

bool GroupCommit::Written(Ticket ticket) const {
  absl::MutexLock lock(&mu_);
  return written_seq_ >= ticket;
}

GroupCommit::Ticket GroupCommit::Unsettled() const {
  absl::MutexLock lock(&mu_);
  return sealed_seq_ > settled_seq_ ? sealed_seq_ : 0;
}

bool GroupCommit::failed() const {
  absl::MutexLock lock(&mu_);
  return !failure_.ok();
}

absl::Status GroupCommit::health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

void GroupCommit::RecordFailureLocked(Ticket first, Ticket last,
                                      absl::Status error) {
  failed_writes_[last] = {first, std::move(error)};
  if (failed_writes_.size() > 64) failed_writes_.erase(failed_writes_.begin());
}

absl::StatusOr<StateStore::Snapshot> GroupCommit::LoadCommitted(
    uint64_t* failure) {
  absl::MutexLock store_lock(&store_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      return absl::FailedPreconditionError("GroupCommit: no failed write");
    }
    *failure = failures_;
  }
  // Nothing is written until TakeFailure, which needs this failure.
  return store_->Load();
}

std::optional<GroupCommit::Failure> GroupCommit::TakeFailure(uint64_t failure) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok() || failure != failures_) return std::nullopt;
  Failure settled{failure_, {}, {}};
  auto note = [&settled](const StateStore::Batch& batch) {
    for (const auto& [num, info] : batch.workers) settled.workers.insert(num);
    for (const auto& [num, job] : batch.jobs) settled.jobs.insert(num);
    for (const auto& [num, event] : batch.events) settled.jobs.insert(num);
    for (const auto& [num, a] : batch.assignments) settled.jobs.insert(num);
    for (const auto& f : batch.finished_ranks) settled.jobs.insert(f.job_num);
  };
  note(failed_batch_);
  for (const auto& [seq, batch] : sealed_) note(batch);
  if (!sealed_.empty()) {
    RecordFailureLocked(sealed_.front().first, sealed_.back().first, failure_);
    written_seq_ = sealed_.back().first;
    sealed_.clear();
  }
  settled_seq_ = sealed_seq_;
  failure_ = absl::OkStatus();
  failed_batch_ = StateStore::Batch();
  return settled;
}

absl::Status GroupCommit::Probe() {
  absl::MutexLock store_lock(&store_mu_);
  absl::Status status = store_->Probe();
  absl::MutexLock lock(&mu_);
  health_ = status;
  return status;
}

absl::Status GroupCommit::OutcomeLocked(Ticket ticket) const {
  auto failed = failed_writes_.lower_bound(ticket);
  if (failed != failed_writes_.end() && failed->second.first <= ticket) {
    return failed->second.second;
  }
  return absl::OkStatus();
}

absl::Status GroupCommit::Await(Ticket ticket) {
  if (ticket == 0) return absl::OkStatus();
  // Written already: answered without the store lock, which a write in
  // progress holds.
  {
    absl::MutexLock lock(&mu_);
    if (written_seq_ >= ticket) return OutcomeLocked(ticket);
    if (!failure_.ok()) return failure_;  // stopped: it rests on that write
  }
  absl::MutexLock store_lock(&store_mu_);
  std::deque<std::pair<Ticket, StateStore::Batch>> group;
  {
    absl::MutexLock lock(&mu_);
    // Another caller wrote it while this one waited for store_mu_.
    if (written_seq_ >= ticket) return OutcomeLocked(ticket);
    if (!failure_.ok()) return failure_;
    group.swap(sealed_);
  }
  if (group.empty()) {
    return absl::InvalidArgumentError("GroupCommit: ticket never sealed");
  }
  StateStore::Batch all;
  for (auto& [seq, batch] : group) {
    // Later batches' rows replace earlier ones (INSERT OR REPLACE, in order).
    auto append = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.end()));
    };
    append(all.workers, batch.workers);
    append(all.jobs, batch.jobs);
    append(all.events, batch.events);
    append(all.assignments, batch.assignments);
    append(all.finished_ranks, batch.finished_ranks);
  }
  const absl::Status status = store_->Commit(all);
  absl::MutexLock lock(&mu_);
  written_seq_ = group.back().first;
  health_ = status;
  if (!status.ok()) {
    RecordFailureLocked(group.front().first, group.back().first, status);
    // Stopped until TakeFailure: later batches were built on this one.
    failure_ = status;
    ++failures_;
    failed_batch_ = std::move(all);
  }
  return status;
}

}  // namespace coordinator
}  // namespace pshard
