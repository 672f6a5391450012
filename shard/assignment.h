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
//   sharded:     no bucket has one owner (kEveryRank): each is cut into
//                world_size element ranges by ShardRanges, rank r owning
//                range r, so every rank owns 1/world_size of every bucket.
#ifndef PSHARD_SHARD_ASSIGNMENT_H_
#define PSHARD_SHARD_ASSIGNMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard {
namespace shard {

// The owner AssignBuckets gives every bucket under SHARDED: the bucket is
// split across all ranks by ShardRanges.
inline constexpr int kEveryRank = -1;

// Range boundaries under SHARDED fall on multiples of this many elements
// (64 bytes of fp32: a cache line, whole vectors for the optimizer kernels).
inline constexpr int64_t kShardAlignElements = 16;

// Elements [begin, end) of a bucket.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const ElementRange& a, const ElementRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// The SHARDED split of a bucket of `numel` elements over `world_size` ranks:
// world_size contiguous ranges in rank order that tile [0, numel), each
// boundary but the last a multiple of kShardAlignElements, sizes differing
// by at most kShardAlignElements (a rank's range may be empty in a bucket of
// fewer than world_size * kShardAlignElements elements). The coordinator and
// every rank compute it alike; it is the whole contract. numel >= 0 and
// world_size >= 1 are the caller's to check.
std::vector<ElementRange> ShardRanges(int64_t numel, int world_size);

// Owner rank of every bucket, indexed like `bucket_bytes` (kEveryRank for
// every bucket under SHARDED).
//
// Errors: InvalidArgument if world_size < 1, a size is negative, or the policy
// is not ROUND_ROBIN, BALANCED, SHARDED or UNSPECIFIED (= BALANCED).
absl::StatusOr<std::vector<int>> AssignBuckets(
    v1::JobSpec::AssignmentPolicy policy,
    absl::Span<const int64_t> bucket_bytes, int world_size);

// Bytes owned by each rank under `owners`. kEveryRank buckets are not
// counted: their split is in elements (BuildShardAssignment counts it from
// the layout).
std::vector<int64_t> OwnedBytes(absl::Span<const int64_t> bucket_bytes,
                                absl::Span<const int> owners, int world_size);

// max(owned bytes) / mean(owned bytes); 1.0 for a perfect split and for an
// empty layout.
double Imbalance(absl::Span<const int64_t> owned_bytes);

}  // namespace shard
}  // namespace pshard

#endif  // PSHARD_SHARD_ASSIGNMENT_H_
