// The checkpoints of one job directory: which is the latest complete one
// (skipping incomplete and corrupt ones, saying why, so a resume falls back
// to the previous complete checkpoint) and pruning that never removes the
// last complete checkpoint before a newer one is complete.
#ifndef PSHARD_CHECKPOINT_CATALOG_H_
#define PSHARD_CHECKPOINT_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"

namespace pshard::checkpoint {

// The steps of the "step-<N>" directories under `root`, ascending (complete
// or not). An absent root has none. Other names are ignored.
absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& root);

struct CompleteCheckpoint {
  std::string step_dir;
  Manifest manifest;
  // Newer checkpoints that were passed over, newest first, each with the
  // reason ("<dir> is incomplete: ...", "<file> is corrupted: ...").
  std::vector<std::string> skipped;
};

// The newest checkpoint under `root` that VerifyCheckpoint accepts (sizes and
// SHA-256 of every shard). NotFound when there is none, listing why each
// candidate was refused.
absl::StatusOr<CompleteCheckpoint> LatestCompleteCheckpoint(
    const std::string& root);

// `path` itself when it holds a manifest (a step directory), else the latest
// complete checkpoint under it, verified either way.
absl::StatusOr<CompleteCheckpoint> ResolveCheckpoint(const std::string& path);

// Keeps the newest `keep_last` complete (verified) checkpoints and removes
// every step directory older than the oldest of them, complete or not.
// Directories newer than the newest complete checkpoint (a write in
// progress, or a failed one) are never touched, and nothing is removed until
// `keep_last` complete checkpoints exist. Returns the removed directories.
// A directory is removed manifest first, so a crash midway leaves an
// incomplete checkpoint, never one that looks complete.
// InvalidArgument: keep_last < 1. I/O errors name the path.
absl::StatusOr<std::vector<std::string>> Prune(const std::string& root,
                                               int keep_last);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_CATALOG_H_
