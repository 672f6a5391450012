// Bucket-to-owner assignment computed without a coordinator, for programs
// that drive the hook themselves (the C++ API) and for tests. Follows the
// rules documented in job_spec.proto: ROUND_ROBIN is bucket i -> rank i mod
// N; BALANCED puts the largest bucket first onto the rank with the fewest
// owned bytes (ties: lower bucket index, then lower rank), and falls back to
// round-robin if that were more imbalanced. The coordinator's BALANCED may
// refine further; any assignment is correct, only the balance differs.
#ifndef PSHARD_WORKER_HOOK_LOCAL_ASSIGNMENT_H_
#define PSHARD_WORKER_HOOK_LOCAL_ASSIGNMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {

// Owner of every bucket. InvalidArgument for world_size < 1 or a negative
// size.
absl::StatusOr<std::vector<int>> LocalAssignBuckets(
    v1::JobSpec::AssignmentPolicy policy,
    absl::Span<const int64_t> bucket_bytes, int world_size);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_LOCAL_ASSIGNMENT_H_
