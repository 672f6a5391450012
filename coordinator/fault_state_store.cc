#include "coordinator/fault_state_store.h"

#include <utility>

namespace pshard {
namespace coordinator {

void FaultStateStore::FailCommits(int count, absl::Status error, int after) {
  absl::MutexLock lock(&mu_);
  pass_count_ = after;
  fail_count_ = count;
  error_ = std::move(error);
}

void FaultStateStore::Heal() {
  absl::MutexLock lock(&mu_);
  pass_count_ = 0;
  fail_count_ = 0;
}

void FaultStateStore::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
}

void FaultStateStore::Release() {
  absl::MutexLock lock(&mu_);
  held_ = false;
}

int64_t FaultStateStore::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

int64_t FaultStateStore::failed_commits() const {
  absl::MutexLock lock(&mu_);
  return failed_commits_;
}

absl::StatusOr<StateStore::Snapshot> FaultStateStore::Load() {
  return inner_->Load();
}

absl::Status FaultStateStore::Probe() {
  {
    absl::MutexLock lock(&mu_);
    if (pass_count_ == 0 && fail_count_ != 0) return error_;
  }
  return inner_->Probe();
}

absl::Status FaultStateStore::Commit(const Batch& batch) {
  if (batch.empty()) return inner_->Commit(batch);
  {
    absl::MutexLock lock(&mu_);
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !held_;
    };
    // A test hold, released by the test thread; no deadline on purpose.
    mu_.Await(absl::Condition(&released));
    ++commits_;
    if (pass_count_ > 0) {
      --pass_count_;
    } else if (fail_count_ != 0) {
      if (fail_count_ > 0) --fail_count_;
      ++failed_commits_;
      return error_;
    }
  }
  // Not under mu_: the inner store may be slow, and the test may arm the
  // next fault meanwhile.
  absl::Status status = inner_->Commit(batch);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    for (const auto& [num, info] : batch.workers) committed_.workers[num] = info;
    for (const auto& [num, job] : batch.jobs) committed_.jobs[num] = job;
    for (const auto& [num, event] : batch.events) {
      committed_.events[num].push_back(event);
    }
    for (const auto& [num, a] : batch.assignments) committed_.assignments[num] = a;
    for (const Batch::FinishedRank& f : batch.finished_ranks) {
      committed_.finished_ranks[f.job_num].insert(f.rank);
    }
  }
  return status;
}

StateStore::Snapshot FaultStateStore::committed() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

}  // namespace coordinator
}  // namespace pshard
