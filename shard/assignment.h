// Bucket-to-rank assignment policies: pure, deterministic functions from
// bucket sizes to owner ranks. The coordinator calls them once per job epoch,
// when every rank has reported the same bucket layout.
//
//   round_robin: bucket i -> rank i mod N (the seed's rule, blind to sizes).
//   balanced:    largest bucket first onto the rank with the fewest owned
//                bytes (ties: lower bucket index first, then lower rank),
//                followed by a deterministic improvement pass (moves and swaps
//                that lower the most-loaded rank). It is never worse than
//                round_robin: if the result were (rarely) worse, round_robin's
//                owners are returned instead.
#ifndef PSHARD_SHARD_ASSIGNMENT_H_
#define PSHARD_SHARD_ASSIGNMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard {
namespace shard {

// Owner rank of every bucket, indexed like `bucket_bytes`.
//
// Errors: InvalidArgument if world_size < 1, a size is negative, or the policy
// is not ROUND_ROBIN, BALANCED or UNSPECIFIED (= BALANCED).
absl::StatusOr<std::vector<int>> AssignBuckets(
    v1::JobSpec::AssignmentPolicy policy,
    absl::Span<const int64_t> bucket_bytes, int world_size);

// Bytes owned by each rank under `owners`.
std::vector<int64_t> OwnedBytes(absl::Span<const int64_t> bucket_bytes,
                                absl::Span<const int> owners, int world_size);

// max(owned bytes) / mean(owned bytes); 1.0 for a perfect split and for an
// empty layout.
double Imbalance(absl::Span<const int64_t> owned_bytes);

}  // namespace shard
}  // namespace pshard

#endif  // PSHARD_SHARD_ASSIGNMENT_H_
