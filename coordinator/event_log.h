// One job's event log: state changes and progress in sequence order
// (1, 2, ...), each stamped with the time it entered; the ids of the waits
// for the next event; and the throttle that lets progress into the log at
// most once per interval (Job.progress itself is always current).
//
//   ReportProgress ──▶ NoteProgress (dirty) ──(ProgressDue, or last step, or
//                      the job ends)──▶ TakeProgressEvent ──▶ Append
//
// The log never calls a callback: Append hands back the waits it woke, for
// the coordinator to answer after its lock. Called under the coordinator's
// lock; not thread-safe itself.
#ifndef PSHARD_COORDINATOR_EVENT_LOG_H_
#define PSHARD_COORDINATOR_EVENT_LOG_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/wait_registry.h"
#include "pshard/v1/job.pb.h"

namespace pshard {
namespace coordinator {

class EventLog {
 public:
  // Replaces the log with `events` as loaded from the state store.
  void Restore(std::vector<v1::JobEvent> events) {
    events_ = std::move(events);
  }

  // Numbers `event` after the last one, stamps it `now` and appends it; the
  // waits parked on the log, which it wakes (and forgets).
  std::vector<WaitId> Append(v1::JobEvent event, absl::Time now);
  // The event Append added last (the log is not empty).
  const v1::JobEvent& last() const { return events_.back(); }

  // Events with sequence > after_sequence (>= 0), at most `max`.
  std::vector<v1::JobEvent> Read(int64_t after_sequence, int max) const;
  bool HasEventAfter(int64_t sequence) const {
    return static_cast<int64_t>(events_.size()) > sequence;
  }
  int64_t size() const { return static_cast<int64_t>(events_.size()); }

  // Wait `id` wants the next event.
  void AddWaiter(WaitId id) { waiters_.push_back(id); }
  // The waits parked on the log, forgotten (some may be gone already).
  std::vector<WaitId> TakeWaiters() { return std::exchange(waiters_, {}); }

  // The job's progress changed since its last progress event.
  void NoteProgress() { progress_dirty_ = true; }
  bool progress_dirty() const { return progress_dirty_; }
  // Whether `interval` has passed since the last progress event.
  bool ProgressDue(absl::Time now, absl::Duration interval) const {
    return now - last_progress_event_ >= interval;
  }
  // The progress event for `progress` (to Append), marking it sent at `now`.
  v1::JobEvent TakeProgressEvent(const v1::JobProgress& progress,
                                 absl::Time now);

 private:
  std::vector<v1::JobEvent> events_;
  std::vector<WaitId> waiters_;
  bool progress_dirty_ = false;
  absl::Time last_progress_event_ = absl::InfinitePast();
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_EVENT_LOG_H_
