// The sharded checkpoint layout (docs/checkpoints.md) and its manifest.
//
//   <root>/step-<N>/shard-<rank>-of-<world>.safetensors   one per owner rank
//   <root>/step-<N>/manifest.json                          written last
//
// A step directory without a readable manifest is incomplete and never
// counts. The manifest records the step, the job spec's fingerprint, the
// world size and, per shard file, its size and SHA-256, so a checkpoint can
// be verified without trusting anything else in the directory.
#ifndef PSHARD_CHECKPOINT_MANIFEST_H_
#define PSHARD_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pshard::checkpoint {

inline constexpr absl::string_view kManifestFileName = "manifest.json";
inline constexpr absl::string_view kCheckpointFormat = "pshard-checkpoint-v1";
inline constexpr int64_t kMaxManifestBytes = int64_t{16} << 20;

// "<root>/step-<step>".
std::string StepDirectory(absl::string_view root, int64_t step);
// "shard-<rank>-of-<world_size>.safetensors".
std::string ShardFileName(int rank, int world_size);
// The step of a directory name "step-<N>" (canonical decimal), or -1 when
// the name is not one.
int64_t ParseStepDirectoryName(absl::string_view name);

// One shard file as the manifest records it.
struct ShardFileInfo {
  std::string name;  // relative to the step directory
  int rank = 0;
  int64_t size_bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

struct Manifest {
  int64_t step = 0;
  std::string spec_fingerprint;
  int world_size = 0;
  std::vector<ShardFileInfo> files;  // by rank
};

// Checks `manifest` is self-consistent: step >= 0, world_size >= 1, exactly
// one file per rank 0..world_size-1 named ShardFileName(rank, world_size),
// sizes >= 0, hashes of 64 hex digits. InvalidArgument naming the field.
absl::Status ValidateManifest(const Manifest& manifest);

std::string ManifestToJson(const Manifest& manifest);
// InvalidArgument naming `source` and the offending field.
absl::StatusOr<Manifest> ManifestFromJson(absl::string_view json,
                                          absl::string_view source);

// Writes <root>/step-<step>/manifest.json atomically (fsync, rename, fsync
// the directory) after checking every shard file is there with the size the
// manifest records. Call it only once every rank's WriteShard succeeded: the
// manifest is what makes the checkpoint count. InvalidArgument: an invalid
// manifest. FailedPrecondition: a shard file missing or of another size
// (named). I/O errors as ErrnoError.
absl::Status WriteManifest(absl::string_view root, const Manifest& manifest);

// Reads <step_dir>/manifest.json. NotFound: no manifest (the checkpoint is
// incomplete). InvalidArgument: malformed (the message names the file and
// the field), or a step that differs from the directory's name.
absl::StatusOr<Manifest> ReadManifest(const std::string& step_dir);

// Reads the manifest and checks every shard file's size and SHA-256.
// NotFound: incomplete (no manifest) or a shard file missing. DataLoss: a
// shard whose size or hash differs (the message names the file).
// InvalidArgument: a malformed manifest.
absl::StatusOr<Manifest> VerifyCheckpoint(const std::string& step_dir);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_MANIFEST_H_
