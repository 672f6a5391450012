// Group commit of the coordinator's writes over a StateStore.
//
// A locked section of the coordinator seals the writes of its change as one
// batch (Seal, under the coordinator's lock, in the order of the changes) and
// gets a ticket. After releasing the lock it calls Await(ticket): whichever
// waiting caller gets the store first writes every batch sealed by then in
// one StateStore::Commit, in order (later rows replace earlier ones); the
// others find their batch written and take its outcome. So a burst of
// changes becomes a few transactions, and a slow disk delays only the
// callers that wait for it, never the coordinator's lock.
//
//   Seal ──▶ sealed ──(Await by anyone: one Commit of all sealed)──▶ written
//                                                       ╲─ failed ──▶ stopped
//   stopped: nothing is written, every unwritten batch's Await fails with
//   the write's error (batches sealed after it were built on its changes),
//   until TakeFailure settles every batch sealed so far as failed, names
//   the records they held (for the coordinator to restore from the store)
//   and lets the next batch be written. Failed outcomes are kept (the
//   latest 64 groups) for Await.
//
// Lock order: the coordinator's lock, then this unit's; the store lock is
// taken first or alone, never under either (Await must not be called under
// the coordinator's lock).
//
// Errors (Await): those of StateStore::Commit, for every batch of the group
// that failed and every batch sealed after it until TakeFailure.
#ifndef PSHARD_COORDINATOR_GROUP_COMMIT_H_
#define PSHARD_COORDINATOR_GROUP_COMMIT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state_store.h"

namespace pshard {
namespace coordinator {

class GroupCommit {
 public:
  // Numbers sealed batches from 1; 0 is "no batch".
  using Ticket = uint64_t;

  // `store` outlives this.
  explicit GroupCommit(StateStore* store) : store_(store) {}

  // Queues `batch` after every batch sealed before; its ticket, or 0 (and
  // nothing queued) when the batch is empty.
  Ticket Seal(StateStore::Batch batch) ABSL_LOCKS_EXCLUDED(mu_);

  // The ticket of the latest batch sealed (0 if none).
  Ticket LastSealed() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether every batch up to `ticket` is written (or failed).
  bool Written(Ticket ticket) const ABSL_LOCKS_EXCLUDED(mu_);

  // The ticket an epilogue waits for: the latest batch sealed, or 0 when
  // every batch sealed so far was settled by TakeFailure (its changes are
  // undone: nothing is left to wait for).
  Ticket Unsettled() const ABSL_LOCKS_EXCLUDED(mu_);

  // Returns once batch `ticket` (and every one before it) is written,
  // writing the sealed batches itself unless another caller is; the outcome
  // of the write that held `ticket` (OK for 0).
  absl::Status Await(Ticket ticket) ABSL_LOCKS_EXCLUDED(mu_, store_mu_);

  // A failed write, settled: its error and the records (by number) that its
  // batches and every batch sealed after it held.
  struct Failure {
    absl::Status error;
    std::set<int64_t> jobs;
    std::set<int64_t> workers;
  };
  // Whether a write failed and is not settled yet (writing is stopped).
  bool failed() const ABSL_LOCKS_EXCLUDED(mu_);
  // While writing is stopped: everything the store holds, which is its last
  // committed state, and `*failure` names the failed write it belongs to.
  // FailedPrecondition when writing is not stopped; errors of
  // StateStore::Load.
  absl::StatusOr<StateStore::Snapshot> LoadCommitted(uint64_t* failure)
      ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  // Settles failed write `failure` (as LoadCommitted named it): every batch
  // sealed so far fails with its error, unwritten, and writing resumes with
  // the next batch sealed. nullopt when that write is settled already.
  // Called where Seal is (under the coordinator's lock), so no batch is
  // sealed meanwhile.
  std::optional<Failure> TakeFailure(uint64_t failure) ABSL_LOCKS_EXCLUDED(mu_);

  // Proves that the store can commit (StateStore::Probe), writing no
  // state; its outcome.
  absl::Status Probe() ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  // The outcome of the latest write or probe (OK before the first).
  absl::Status health() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The outcome of written batch `ticket`.
  absl::Status OutcomeLocked(Ticket ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Batches first..last failed with `error`.
  void RecordFailureLocked(Ticket first, Ticket last, absl::Status error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StateStore* const store_;
  // Held while writing; taken before mu_, never while holding it.
  absl::Mutex store_mu_;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(store_mu_);
  std::deque<std::pair<Ticket, StateStore::Batch>> sealed_ ABSL_GUARDED_BY(mu_);
  Ticket sealed_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches up to this one are written (or failed).
  Ticket written_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Failed writes: last ticket -> (first ticket, error); the latest 64.
  std::map<Ticket, std::pair<Ticket, absl::Status>> failed_writes_
      ABSL_GUARDED_BY(mu_);
  // The unsettled failed write's error (OK when none) and its batches.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // Counts failed writes: names the unsettled one.
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  StateStore::Batch failed_batch_ ABSL_GUARDED_BY(mu_);
  // Batches up to this one were settled as failed.
  Ticket settled_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_GROUP_COMMIT_H_
