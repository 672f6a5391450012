// Bucket layouts as reported by workers during the bucket-rebuild phase:
// validation of one report, comparison between ranks, and turning the agreed
// layout plus owner ranks into the published ShardAssignment.
#ifndef PSHARD_SHARD_LAYOUT_H_
#define PSHARD_SHARD_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.pb.h"

namespace pshard {
namespace shard {

using Layout = google::protobuf::RepeatedPtrField<v1::BucketLayout>;

struct LayoutLimits {
  int max_buckets = 65536;
  int max_name_length = 256;
  // Parameters over all buckets of one report.
  int64_t max_parameters = int64_t{1} << 20;
  // Elements of one parameter (2^40: far beyond any real tensor, and small
  // enough that byte counts cannot overflow).
  int64_t max_parameter_elements = int64_t{1} << 40;
};

// Bytes per element of a safetensors dtype name ("F32", "BF16", "F16");
// 0 for any other name.
int64_t DtypeSize(absl::string_view dtype);

// Checks one rank's report: at least one and at most max_buckets buckets,
// bucket i has index i, every bucket has a parameter, names are 1..
// max_name_length characters, element counts in 1..max_parameter_elements,
// dtypes known.
//
// Errors: InvalidArgument naming the bucket and parameter.
absl::Status ValidateLayout(const Layout& layout, const LayoutLimits& limits);

// Where two valid layouts first differ.
struct LayoutDifference {
  // First bucket index at which they differ (the shorter layout's size when
  // one is a prefix of the other).
  int bucket = 0;
  std::string detail;
};

// std::nullopt when `a` and `b` are identical.
std::optional<LayoutDifference> CompareLayouts(const Layout& a,
                                               const Layout& b);

// Bytes and elements of each bucket of a valid layout.
std::vector<int64_t> BucketBytes(const Layout& layout);

// The assignment of a valid `layout` to `members` (ordered by rank) under
// `policy`; under SHARDED each bucket's owner is kEveryRank and its
// `ranges` say which elements (bytes, parameters) each rank owns.
//
// Errors: InvalidArgument if members is empty or the policy is unknown.
absl::StatusOr<v1::ShardAssignment> BuildShardAssignment(
    absl::string_view job_id, int64_t epoch,
    v1::JobSpec::AssignmentPolicy policy, const Layout& layout,
    const google::protobuf::RepeatedPtrField<v1::JobMember>& members);

// `full` in the ASSIGNMENT_VIEW_OWNERS view: what a rank needs (job, epoch,
// policy, imbalance, total bytes, and each bucket's index and owner rank;
// SHARDED's ranges are left out, since every rank computes them).
v1::ShardAssignment OwnersView(const v1::ShardAssignment& full);

// What a rank reads back from an assignment in either view: the owner rank
// of each of its `num_buckets` buckets, indexed by bucket.
//
// Under SHARDED every owner is kEveryRank (the bucket's ShardRanges).
//
// Errors: InvalidArgument if a bucket is named twice, out of range or not at
// all, or an owner is not in 0..world_size-1 (not kEveryRank under
// SHARDED).
absl::StatusOr<std::vector<int>> DecodeOwners(
    const v1::ShardAssignment& assignment, int num_buckets, int world_size);

}  // namespace shard
}  // namespace pshard

#endif  // PSHARD_SHARD_LAYOUT_H_
