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
  }
  absl::MutexLock store_lock(&store_mu_);
  std::deque<std::pair<Ticket, StateStore::Batch>> group;
  {
    absl::MutexLock lock(&mu_);
    // Another caller wrote it while this one waited for store_mu_.
    if (written_seq_ >= ticket) return OutcomeLocked(ticket);
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
  if (!status.ok()) {
    failed_writes_[group.back().first] = {group.front().first, status};
    if (failed_writes_.size() > 64) failed_writes_.erase(failed_writes_.begin());
  }
  return status;
}

}  // namespace coordinator
}  // namespace pshard
