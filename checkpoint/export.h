// A checkpoint's full parameters as one ordinary safetensors file (no
// optimizer state): what `pshardctl export` runs. Streamed shard by shard,
// one tensor in memory at a time, so memory stays bounded by the largest
// tensor however large the model (unlike gathering a full state dict in one
// process, as consolidate_state_dict does, pytorch#68181).
#ifndef PSHARD_CHECKPOINT_EXPORT_H_
#define PSHARD_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/sha256.h"

namespace pshard::checkpoint {

struct ExportResult {
  std::string step_dir;  // the checkpoint exported
  int64_t step = 0;
  int64_t parameters = 0;
  FileDigest file;  // of the output
};

// Verifies the checkpoint at `checkpoint` (a step directory, or a job's
// checkpoint directory: then its latest complete checkpoint; see
// ResolveCheckpoint) and writes its parameters, sorted by name, to
// `out_path` atomically, with __metadata__ {"format": "pt", pshard.step,
// pshard.spec_fingerprint}. The output does not depend on the world size
// the checkpoint was written at. Errors: those of ResolveCheckpoint and
// ShardReader::Open (naming the refused file), and of the write (naming
// `out_path`; ResourceExhausted for a full disk).
absl::StatusOr<ExportResult> ExportParameters(const std::string& checkpoint,
                                              const std::string& out_path);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_EXPORT_H_
