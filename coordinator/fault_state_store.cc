#include "coordinator/fault_state_store.h"

#include <utility>

namespace pshard {
namespace coordinator {

void FaultStateStore::FailCommits(int count, absl::Status error, int pass) {
  absl::MutexLock lock(&mu_);
  pass_count_ = pass;
  fail_count_ = count;
  error_ = std::move(error);
}

void FaultStateStore::Heal() {
  absl::MutexLock lock(&mu_);
  pass_count_ = 0;
  fail_count_ = 0;
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

absl::Status FaultStateStore::Commit(const Batch& batch) {
  if (batch.empty()) return inner_->Commit(batch);
  {
    absl::MutexLock lock(&mu_);
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
  return inner_->Commit(batch);
}

}  // namespace coordinator
}  // namespace pshard
