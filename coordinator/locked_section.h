// The coordinator's locked section (private to its .cc files): the writes a
// section gathers (Pending) and the scope that holds the coordinator's one
// mutex and ends in the "commit, then reply" epilogue (Locked).
//
// Every public method of the Coordinator is one Locked scope: lock, check
// and change the units, seal the writes; then, after the unlock, wait for
// the write and run the deferred callbacks. The lock is never released in
// the middle of a change.
//
// Commit or nothing. A section changes memory before its write, and group
// commit lets later sections build on it before it is written. So when a
// write fails (a full disk: the store's error), GroupCommit stops writing:
// every batch not yet written fails with that error, since it rests on the
// failed one. The first epilogue to see the failure rolls back
// (Coordinator::RollBackFailedWrite): it loads the store's state, which is
// the last committed one, and under the lock settles the failure
// (GroupCommit::TakeFailure names the jobs and workers the failed batches
// held) and puts exactly those records back as stored (RestoreRecords,
// recovery.h), ending the waits of the undone epochs. Then writing resumes.
// Every section whose batch failed, or that waited for one that did,
// answers Unavailable with the store's error, and so do the callbacks it
// deferred (DeferAnswer): no wait is answered with an undone change, and a
// heartbeat reply whose directives rest on one is refused. Job and worker
// numbers of undone records are not handed out again.
#ifndef PSHARD_COORDINATOR_LOCKED_SECTION_H_
#define PSHARD_COORDINATOR_LOCKED_SECTION_H_

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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
    if (held_) RunDeferred(Unlock(), absl::OkStatus());
  }

  // The epilogue: OK when this section's writes, and every write before
  // them, committed (see CommitWait); else Unavailable with the store's
  // error, after the rollback.
  absl::Status Commit(CommitWait wait = CommitWait::kAllSealed)
      ABSL_UNLOCK_FUNCTION() {
    const uint64_t mine = c_->Seal();
    if (mine == 0 && wait == CommitWait::kOwnBatch) {
      RunDeferred(Unlock(), absl::OkStatus());
      return absl::OkStatus();
    }
    // Wait for every batch sealed so far, ours or not: no reply may rest on
    // state that is not durable yet.
    const uint64_t ticket = c_->commit_.Unsettled();
    std::vector<Deferred> fns = Unlock();
    const absl::Status status = Settle(c_, c_->commit_.Await(ticket));
    RunDeferred(std::move(fns), status);
    return status;
  }

  // The epilogue without waiting: `done` gets the outcome (as Commit's);
  // it and the callbacks this section deferred run after the write, on the
  // notifier thread (inline when everything was written already).
  void CommitInBackground(std::function<void(absl::Status)> done)
      ABSL_UNLOCK_FUNCTION() {
    c_->Seal();
    const uint64_t ticket = c_->commit_.Unsettled();
    c_->Defer([done = std::move(done)](const absl::Status& commit) {
      done(commit);
    });
    std::vector<Deferred> fns = Unlock();
    if (c_->commit_.Written(ticket)) {  // Await answers without the store
      RunDeferred(std::move(fns), Settle(c_, c_->commit_.Await(ticket)));
      return;
    }
    Coordinator* c = c_;
    c_->notifier_->Post({[c, ticket, fns = std::move(fns)] {
      const absl::Status status = Settle(c, c->commit_.Await(ticket));
      for (const auto& fn : fns) fn(status);
    }});
  }

 private:
  using Deferred = Coordinator::Deferred;

  // A failed write's outcome, after its rollback: Unavailable, with the
  // store's error.
  static absl::Status Settle(Coordinator* c, absl::Status status) {
    if (status.ok()) return status;
    c->RollBackFailedWrite();
    return absl::UnavailableError(absl::StrCat(
        "the coordinator's state store could not commit this change, so "
        "nothing was changed (retry): ",
        status.message()));
  }

  // Releases mu_; the callbacks this section deferred.
  std::vector<Deferred> Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<Deferred> fns = std::move(c_->deferred_);
    c_->deferred_.clear();
    held_ = false;
    c_->mu_.Unlock();
    return fns;
  }
  void RunDeferred(std::vector<Deferred> fns, const absl::Status& commit) {
    c_->RunDeferred(std::move(fns), commit);
  }

  Coordinator* const c_;
  bool held_ = true;
};


template <typename Done, typename Result>
void Coordinator::DeferAnswer(Done done, Result result) {
  Defer([done = std::move(done), result = std::move(result)](
            const absl::Status& commit) mutable {
    if (commit.ok()) {
      done(std::move(result));
    } else {
      done(commit);
    }
  });
}

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_LOCKED_SECTION_H_
