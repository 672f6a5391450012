// The coordinator's locked section (private to its .cc files): the writes a
// section gathers (Pending) and the scope that holds the coordinator's one
// mutex and ends in the "commit, then reply" epilogue (Locked).
//
// Every public method of the Coordinator is one Locked scope: lock, check
// and change the units, seal the writes; then, after the unlock, wait for
// the write and run the deferred callbacks. The lock is never released in
// the middle of a change.
#ifndef PSHARD_COORDINATOR_LOCKED_SECTION_H_
#define PSHARD_COORDINATOR_LOCKED_SECTION_H_

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"

namespace pshard {
namespace coordinator {

// Writes gathered during one locked section, sealed by its epilogue
// (Locked::Commit).
struct Coordinator::Pending {
  std::set<int64_t> jobs;
  std::set<int64_t> workers;
  std::vector<std::pair<int64_t, v1::JobEvent>> events;
  std::vector<std::pair<int64_t, v1::ShardAssignment>> assignments;
  std::vector<StateStore::Batch::FinishedRank> finished_ranks;
};

// One locked section: holds mu_ from construction to its epilogue, Commit()
// (or CommitInBackground(), or the destructor when the section changed
// nothing durable). The epilogue seals the section's writes, releases mu_,
// waits for the write (GroupCommit::Await) and then runs the callbacks the
// section deferred (many of them: on the notifier thread). A reply is built
// under the lock, before the epilogue, and returned after it.
class ABSL_SCOPED_LOCKABLE Coordinator::Locked {
 public:
  explicit Locked(const Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_)
      : c_(const_cast<Coordinator*>(c)) {
    c_->mu_.Lock();
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;
  ~Locked() ABSL_UNLOCK_FUNCTION() {
    if (held_) RunDeferred(Unlock());
  }

  // The epilogue: the outcome of this section's writes (OK when it had
  // none; see CommitWait).
  absl::Status Commit(CommitWait wait = CommitWait::kAllSealed)
      ABSL_UNLOCK_FUNCTION() {
    const uint64_t mine = c_->Seal();
    if (mine == 0 && wait == CommitWait::kOwnBatch) {
      RunDeferred(Unlock());
      return absl::OkStatus();
    }
    // Wait for every batch sealed so far, ours or not: no reply may rest on
    // state that is not durable yet.
    const uint64_t ticket = c_->commit_.LastSealed();
    std::vector<std::function<void()>> fns = Unlock();
    const absl::Status status = c_->commit_.Await(ticket);
    RunDeferred(std::move(fns));
    return mine == 0 ? absl::OkStatus() : status;
  }

  // The epilogue without waiting: `done` gets the outcome of this section's
  // writes; it and the callbacks this section deferred run after the write,
  // on the notifier thread (inline when everything was written already).
  void CommitInBackground(std::function<void(absl::Status)> done)
      ABSL_UNLOCK_FUNCTION() {
    const uint64_t mine = c_->Seal();
    const uint64_t ticket = c_->commit_.LastSealed();
    if (c_->commit_.Written(ticket)) {
      c_->Defer([done = std::move(done)] { done(absl::OkStatus()); });
      RunDeferred(Unlock());
      return;
    }
    std::vector<std::function<void()>> fns = Unlock();
    Coordinator* c = c_;
    c_->notifier_->Post({[c, ticket, mine, fns = std::move(fns),
                          done = std::move(done)] {
      const absl::Status status = c->commit_.Await(ticket);
      for (const auto& fn : fns) fn();
      done(mine == 0 ? absl::OkStatus() : status);
    }});
  }

 private:
  // Releases mu_; the callbacks this section deferred.
  std::vector<std::function<void()>> Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<std::function<void()>> fns = std::move(c_->deferred_);
    c_->deferred_.clear();
    held_ = false;
    c_->mu_.Unlock();
    return fns;
  }
  void RunDeferred(std::vector<std::function<void()>> fns) {
    c_->RunDeferred(std::move(fns));
  }

  Coordinator* const c_;
  bool held_ = true;
};


}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_LOCKED_SECTION_H_
