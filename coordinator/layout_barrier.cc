#include "coordinator/layout_barrier.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pshard {
namespace coordinator {

void LayoutBarrier::Reset(int world_size, bool all_reported) {
  DropReference();
  reference_rank_ = -1;
  reported_.assign(world_size, all_reported);
  reported_count_ = all_reported ? world_size : 0;
}

void LayoutBarrier::DropReference() {
  reference_.reset();
  reference_encoding_ = EncodedLayout();
  reference_fingerprint_.clear();
}

bool LayoutBarrier::MatchesReference(const EncodedLayout& layout,
                                     absl::string_view fingerprint,
                                     bool by_fingerprint) const {
  if (!reference_.has_value()) return false;
  return by_fingerprint ? fingerprint == reference_fingerprint_
                        : layout == reference_encoding_;
}

absl::StatusOr<bool> LayoutBarrier::Accept(const EncodedLayout& layout,
                                           int rank, absl::string_view who,
                                           const shard::LayoutLimits& limits) {
  absl::StatusOr<EncodedLayout::Buckets> parsed = layout.Decode();
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " sent a bucket layout that does not parse"));
  }
  const absl::Status valid = shard::ValidateLayout(*parsed, limits);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " reported an invalid bucket layout: ", valid.message()));
  }
  if (!reference_.has_value()) {
    reference_ = *std::move(parsed);
    reference_rank_ = rank;
    reference_encoding_ = layout;
    reference_fingerprint_ = layout.Fingerprint();
    return true;
  }
  if (std::optional<shard::LayoutDifference> diff =
          shard::CompareLayouts(*reference_, *parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket layout mismatch: ", who, " differs from rank ",
        reference_rank_, " at bucket ", diff->bucket, ": ", diff->detail));
  }
  return false;
}

bool LayoutBarrier::AcceptFingerprint(int rank, absl::string_view fingerprint) {
  if (fingerprint != reference_fingerprint_) return false;
  MarkReported(rank);
  return true;
}

void LayoutBarrier::MarkReported(int rank) {
  if (!reported_[rank]) {
    reported_[rank] = true;
    ++reported_count_;
  }
}

}  // namespace coordinator
}  // namespace pshard
