// The coordinator's pending blocking calls: a KvGet waiting for its key, a
// GetAssignment waiting for publication, a WaitForEvents waiting for the next
// event, a fingerprint-only layout report waiting for the first full one.
// Each kind is its own type holding its own callback; a Wait is one of them.
//
//   Park ──▶ pending ──Take (the awaited thing happened) ──▶ answered by caller
//                     ├─TakeExpired (deadline passed)      ──▶ answered by caller
//                     └─Cancel (the caller gave up)        ──▶ dropped, no answer
//
// The registry only holds waits and their deadlines; it never runs a
// callback. Whoever takes a wait answers it (the coordinator defers that to
// after its lock). Per-job lists of wait ids (in the job's units) may hold
// ids that are gone: Take returns nullopt for them.
//
// Called under the coordinator's lock; not thread-safe itself.
// Errors: ResourceExhausted from CheckCapacity when max_waits are pending.
#ifndef PSHARD_COORDINATOR_WAIT_REGISTRY_H_
#define PSHARD_COORDINATOR_WAIT_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/rendezvous_store.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace coordinator {

// Numbers waits from 1; 0 is "answered at once, nothing to cancel".
using WaitId = uint64_t;
// The values of a KvRead's keys (a prefix of them; rendezvous_store.h).
using KvValuesCallback =
    std::function<void(absl::StatusOr<std::vector<KvValue>>)>;
// Assignments are shared, not copied: thousands of ranks wait for the same
// one.
using AssignmentPtr = std::shared_ptr<const v1::ShardAssignment>;
using AssignmentCallback = std::function<void(absl::StatusOr<AssignmentPtr>)>;
using EventsCallback = std::function<void(absl::Status)>;
using ReportCallback =
    std::function<void(absl::StatusOr<v1::ReportBucketsResponse>)>;

// KvGet/KvGetMany of keys not yet all Put in the job's rendezvous store;
// parked on read.keys[read.present].
struct KvWait {
  int64_t job_num = 0;
  int64_t epoch = 0;
  KvRead read;
  KvValuesCallback done;
};

// GetAssignment before the epoch's assignment is published.
struct AssignmentWait {
  int64_t job_num = 0;
  int64_t epoch = 0;
  // Wants the OwnersView instead of the full assignment.
  bool owners_view = false;
  AssignmentCallback done;
};

// WaitForEvents with no event after the caller's sequence yet.
struct EventsWait {
  int64_t job_num = 0;
  EventsCallback done;
};

// A fingerprint-only layout report that arrived before any full one.
struct LayoutWait {
  int64_t job_num = 0;
  int64_t epoch = 0;
  int rank = -1;
  std::string fingerprint;
  ReportCallback done;
};

using Wait = std::variant<KvWait, AssignmentWait, EventsWait, LayoutWait>;

class WaitRegistry {
 public:
  explicit WaitRegistry(int max_waits) : max_waits_(max_waits) {}

  // ResourceExhausted when max_waits waits are pending.
  absl::Status CheckCapacity() const;

  // Holds `wait` until `deadline` (the caller caps it); its id (never 0).
  WaitId Park(Wait wait, absl::Time deadline);

  // The pending wait `id` of kind T, removed; nullopt (and nothing removed)
  // when it has been answered or cancelled already, or is of another kind.
  template <typename T>
  std::optional<T> Take(WaitId id) {
    auto it = waits_.find(id);
    if (it == waits_.end()) return std::nullopt;
    T* wait = std::get_if<T>(&it->second);
    if (wait == nullptr) return std::nullopt;
    std::optional<T> out(std::move(*wait));
    waits_.erase(it);
    return out;
  }

  // The pending wait `id` of kind T, left in place; null as for Take.
  template <typename T>
  T* Find(WaitId id) {
    auto it = waits_.find(id);
    return it == waits_.end() ? nullptr : std::get_if<T>(&it->second);
  }

  // Drops wait `id` without answering it; a no-op for one already gone.
  void Cancel(WaitId id) { waits_.erase(id); }

  // Removes and returns the waits whose deadline is at or before `now`,
  // earliest deadline first (ties in the order they were parked).
  std::vector<Wait> TakeExpired(absl::Time now);

  // Removes and returns every pending wait, in id order.
  std::vector<Wait> TakeAll();

  size_t size() const { return waits_.size(); }

 private:
  const int max_waits_;
  WaitId next_id_ = 0;
  std::map<WaitId, Wait> waits_;
  // (deadline, id) of parked waits; ids of waits already gone are skipped.
  std::multimap<absl::Time, WaitId> deadlines_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_WAIT_REGISTRY_H_
