// The job-spec fingerprint a checkpoint records (manifest and every shard's
// metadata), so a resume refuses a checkpoint of another model or optimizer.
#ifndef PSHARD_CHECKPOINT_SPEC_FINGERPRINT_H_
#define PSHARD_CHECKPOINT_SPEC_FINGERPRINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::checkpoint {

// SHA-256 (64 lowercase hex digits) of what decides the parameters' names,
// shapes and meaning: the workload, the optimizer and the seed. Everything a
// resume may change is left out (name, world_size, min_world_size,
// max_restarts, steps, checkpoint, from_checkpoint, output_dir, backend,
// bucketing, comm mode, progress and timeouts), so the same training resumed
// at another world size, or continued as a new job with `from_checkpoint`,
// has the same fingerprint. Defaults are applied first: an unset field and
// its default agree.
absl::StatusOr<std::string> SpecFingerprint(const v1::JobSpec& spec);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_SPEC_FINGERPRINT_H_
