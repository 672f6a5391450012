// The layout barrier of one job epoch: every rank reports its bucket layout
// and the assignment is published once all have, and agree.
//
// The first full report (decoded and valid) becomes the reference: its
// layout, its encoding, its LayoutFingerprint and its rank. A later report
// is accepted at once when its encoding (or, for a fingerprint-only report,
// its fingerprint) equals the reference's; any other full report is decoded,
// validated and compared field by field (Accept). The barrier counts the
// ranks that reported, each once; it is complete when all did.
//
//   Reset ──▶ no reference ──(first valid full report)──▶ reference set
//               │   ╲ fingerprint-only reports wait (AddWaiter) and are
//               │    ╲ answered when the reference is set (AcceptFingerprint)
//               └──────(a report that differs or is invalid)──▶ mismatch:
//                       the job fails with Accept's reason
//
// Called under the coordinator's lock; not thread-safe itself.
// Errors (Accept), whose message is the job's failure reason:
//   InvalidArgument: "<who> sent a bucket layout that does not parse",
//     "<who> reported an invalid bucket layout: ...", "bucket layout
//     mismatch: <who> differs from rank R at bucket B: ...".
#ifndef PSHARD_COORDINATOR_LAYOUT_BARRIER_H_
#define PSHARD_COORDINATOR_LAYOUT_BARRIER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/encoded_layout.h"
#include "coordinator/wait_registry.h"
#include "shard/layout.h"

namespace pshard {
namespace coordinator {

class LayoutBarrier {
 public:
  // A new epoch of `world_size` ranks with no reference; none reported, or
  // all (a RUNNING job recovered after a restart: its layout was checked
  // before, and its published assignment stands).
  void Reset(int world_size, bool all_reported = false);
  // Forgets the reference (the job ended); the counts stay for messages.
  void DropReference();

  bool has_reference() const { return reference_.has_value(); }
  // The reference layout (has_reference()).
  const shard::Layout& reference() const { return *reference_; }
  const std::string& reference_fingerprint() const {
    return reference_fingerprint_;
  }

  // Whether a report equals the reference byte for byte: its fingerprint
  // when `by_fingerprint`, else its encoding. False with no reference.
  bool MatchesReference(const EncodedLayout& layout,
                        absl::string_view fingerprint,
                        bool by_fingerprint) const;

  // A full report of `rank` (named `who` in errors) that does not match by
  // bytes: decodes and validates it, then makes it the reference (true) or
  // finds it equal to the reference field by field (false). Does not count
  // the rank as reported (MarkReported).
  absl::StatusOr<bool> Accept(const EncodedLayout& layout, int rank,
                              absl::string_view who,
                              const shard::LayoutLimits& limits);

  // A parked fingerprint-only report of `rank`, now that the reference is
  // set: counts the rank as reported and returns true when `fingerprint` is
  // the reference's; false when the rank must send its layout in full.
  bool AcceptFingerprint(int rank, absl::string_view fingerprint);

  // Counts `rank` (in 0..world_size) as reported; idempotent.
  void MarkReported(int rank);
  int reported() const { return reported_count_; }
  bool complete() const {
    return reported_count_ == static_cast<int>(reported_.size());
  }

  // Fingerprint-only reports waiting for the reference.
  void AddWaiter(WaitId id) { waiters_.push_back(id); }
  std::vector<WaitId> TakeWaiters() { return std::exchange(waiters_, {}); }

 private:
  std::optional<shard::Layout> reference_;
  // The reference report's encoding and its LayoutFingerprint.
  EncodedLayout reference_encoding_;
  std::string reference_fingerprint_;
  int reference_rank_ = -1;
  std::vector<bool> reported_;
  int reported_count_ = 0;
  std::vector<WaitId> waiters_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_LAYOUT_BARRIER_H_
