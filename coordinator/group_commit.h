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
//                                                       ╲─ failed: kept
//                                        (the latest 64 groups) for Await
//
// Lock order: the coordinator's lock, then this unit's; the store lock is
// taken first or alone, never under either (Await must not be called under
// the coordinator's lock).
//
// Errors (Await): those of StateStore::Commit, for every batch of the group
// that failed.
#ifndef PSHARD_COORDINATOR_GROUP_COMMIT_H_
#define PSHARD_COORDINATOR_GROUP_COMMIT_H_

#include <cstdint>
#include <deque>
#include <map>
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

  // Returns once batch `ticket` (and every one before it) is written,
  // writing the sealed batches itself unless another caller is; the outcome
  // of the write that held `ticket` (OK for 0).
  absl::Status Await(Ticket ticket) ABSL_LOCKS_EXCLUDED(mu_, store_mu_);

 private:
  // The outcome of written batch `ticket`.
  absl::Status OutcomeLocked(Ticket ticket) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_GROUP_COMMIT_H_
