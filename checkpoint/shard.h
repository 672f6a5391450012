// Writing and reading one sharded checkpoint (layout in manifest.h and
// docs/checkpoints.md).
//
// Each owner rank writes one safetensors file keyed by PARAMETER NAME:
// "<param>" holds the parameter and "<param>.<state>" each optimizer state
// tensor ("exp_avg", "exp_avg_sq", "momentum_buffer", ...). Nothing in a
// shard depends on bucket layout or world size, so a job resumed at another
// world size (or with other buckets) reads each of its parameters' state by
// name from whichever shard holds it: resharding is a read.
//
// A shard may hold a SLICE of a tensor (the SHARDED assignment policy, where
// a parameter's elements are split over ranks): elements [offset,
// offset + n) of the flattened tensor, stored 1-D and declared in the
// shard's "pshard.slices" metadata. The reader joins the slices of a name
// from every shard (they must tile the tensor exactly), so a reader never
// sees the difference.
//
//   // on every owner rank, at step 50:
//   ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Create(dir, rank, world, fp));
//   ASSIGN_OR_RETURN(ShardFileInfo file, writer.WriteShard(50, my_parameters));
//   // once every rank's file is in (the coordinator collects them):
//   RETURN_IF_ERROR(WriteManifest(dir, {50, fp, world, files}));
//   // on resume, at any world size:
//   ASSIGN_OR_RETURN(auto latest, LatestCompleteCheckpoint(dir));
//   ASSIGN_OR_RETURN(auto reader, ShardReader::Open(latest.step_dir));
//   RETURN_IF_ERROR(reader->ReadInto("layer1.weight.exp_avg", my_buffer));
#ifndef PSHARD_CHECKPOINT_SHARD_H_
#define PSHARD_CHECKPOINT_SHARD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

namespace pshard::checkpoint {

// Metadata keys every shard carries in its __metadata__.
inline constexpr absl::string_view kMetaFormat = "pshard.format";
inline constexpr absl::string_view kMetaStep = "pshard.step";
inline constexpr absl::string_view kMetaSpecFingerprint = "pshard.spec_fingerprint";
inline constexpr absl::string_view kMetaRank = "pshard.rank";
inline constexpr absl::string_view kMetaWorldSize = "pshard.world_size";
// A JSON array of the parameter names the shard holds (its other tensors are
// their optimizer state).
inline constexpr absl::string_view kMetaParameters = "pshard.parameters";
// Only in a shard that holds slices: a JSON object from each sliced tensor's
// name to {"offset": <first element>, "shape": [<the whole tensor's shape>]}.
inline constexpr absl::string_view kMetaSlices = "pshard.slices";
// Only in a shard whose program saved some: the program's own state (a
// scheduler's, a data loader's position, RNG states), bytes in base64.
inline constexpr absl::string_view kMetaProgramState = "pshard.program_state";
// The largest program state a shard takes (it travels in the header).
inline constexpr int64_t kMaxProgramStateBytes = int64_t{16} << 20;

// Where a stored 1-D tensor sits in the whole one: elements [offset,
// offset + its numel) of the flattened tensor of `shape`.
struct TensorSlice {
  int64_t offset = 0;
  std::vector<int64_t> shape;
};

// A tensor in memory the caller keeps alive while it is written.
struct TensorRef {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  absl::Span<const char> bytes;
};
// An fp32 tensor; a 1-D shape of data.size() when `shape` is empty.
TensorRef FloatTensor(absl::Span<const float> data,
                      std::vector<int64_t> shape = {});

// One parameter and its optimizer state, as its owner holds them.
struct ParameterTensors {
  std::string name;
  TensorRef value;
  // (state name, tensor): stored as "<name>.<state name>".
  std::vector<std::pair<std::string, TensorRef>> state;
  // Set when the owner holds a slice: value and every state tensor are 1-D
  // and hold these elements of the whole parameter.
  std::optional<TensorSlice> slice;
};

// The safetensors name of a parameter's optimizer state tensor.
std::string StateTensorName(absl::string_view parameter,
                            absl::string_view state);

// Checks what WriteShard would refuse before anything is written: an empty
// parameter or state name, a name used twice, bytes not matching a tensor's
// shape and dtype, a slice that is not 1-D or falls outside its shape.
// InvalidArgument naming the tensor.
absl::Status ValidateParameters(absl::Span<const ParameterTensors> parameters);

// InvalidArgument when a program state of `bytes` is over
// kMaxProgramStateBytes.
absl::Status CheckProgramStateSize(int64_t bytes);

// Writes one rank's shards. Cheap to copy; holds no open file.
class CheckpointWriter {
 public:
  // InvalidArgument: empty root, world_size < 1, rank outside [0, world_size).
  static absl::StatusOr<CheckpointWriter> Create(std::string root, int rank,
                                                 int world_size,
                                                 std::string spec_fingerprint);

  // Writes <root>/step-<step>/shard-<rank>-of-<world>.safetensors (creating
  // the root and step directories when missing; the root's parent must
  // exist), streamed one tensor at a
  // time, fsynced and renamed into place; returns the manifest entry (size,
  // SHA-256 computed while writing). InvalidArgument: a negative step, a
  // repeated or empty name, a tensor whose bytes do not match its shape and
  // dtype (named). ResourceExhausted: the disk is full or the file is over
  // the size limit (naming the file; nothing is left at the final name, and
  // other checkpoints are untouched). Other I/O errors as ErrnoError.
  // `program_state`, when set, is stored with the shard (kMetaProgramState;
  // InvalidArgument over kMaxProgramStateBytes).
  absl::StatusOr<ShardFileInfo> WriteShard(
      int64_t step, absl::Span<const ParameterTensors> parameters,
      const std::optional<std::string>& program_state = std::nullopt) const;

  const std::string& root() const { return root_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& spec_fingerprint() const { return spec_fingerprint_; }

 private:
  CheckpointWriter(std::string root, int rank, int world_size,
                   std::string spec_fingerprint);

  std::string root_;
  int rank_;
  int world_size_;
  std::string spec_fingerprint_;
};

// Every shard of one complete checkpoint, open for reading tensors by name.
class ShardReader {
 public:
  enum class Verify { kSizesAndHashes, kSizesOnly };

  // Reads the manifest of `step_dir`, verifies its files (hashes by default:
  // see VerifyCheckpoint for the errors), opens every shard and checks that
  // its metadata agrees with the manifest (DataLoss naming the file
  // otherwise), that no whole tensor is in two shards (DataLoss naming
  // both) and that the slices of each sliced tensor tile it exactly, with
  // one dtype and shape (DataLoss naming the tensor).
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(
      const std::string& step_dir, Verify verify = Verify::kSizesAndHashes);

  const Manifest& manifest() const { return manifest_; }
  // Every parameter of the checkpoint, sorted by name.
  const std::vector<std::string>& parameter_names() const {
    return parameter_names_;
  }
  // The tensor and the shard that holds it; nullptr info when no shard has
  // it. A sliced tensor has its whole dtype, shape and byte size in `info`
  // and no single shard (nullptr): read it with ReadInto or ReadFloats.
  struct Location {
    const SafetensorsReader* shard = nullptr;
    const TensorInfo* info = nullptr;
  };
  Location Find(absl::string_view name) const;

  // Reads tensor `name` into `out` (exactly its byte size). NotFound naming
  // the tensor and the checkpoint; InvalidArgument: wrong buffer size.
  absl::Status ReadInto(absl::string_view name, absl::Span<char> out) const;
  // Reads an F32 tensor. NotFound; InvalidArgument when it is not F32.
  absl::StatusOr<std::vector<float>> ReadFloats(absl::string_view name) const;

  // The program state each rank saved with its shard, by rank (ranks that
  // saved none are absent). DataLoss naming the file: a value that is not
  // base64.
  absl::StatusOr<std::map<int, std::string>> ProgramStates() const;

 private:
  ShardReader(std::string step_dir, Manifest manifest,
              std::vector<std::unique_ptr<SafetensorsReader>> shards);
  absl::Status Index();

  // One shard's part of a sliced tensor.
  struct Slice {
    const SafetensorsReader* shard = nullptr;
    const TensorInfo* info = nullptr;
    int64_t offset = 0;  // elements
  };
  struct SlicedTensor {
    TensorInfo whole;  // name, dtype, shape, numel; begin 0, end its bytes
    std::vector<Slice> slices;  // by offset, tiling the tensor
  };

  std::string step_dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsReader>> shards_;
  absl::flat_hash_map<std::string, Location> index_;
  absl::flat_hash_map<std::string, SlicedTensor> sliced_;
  std::vector<std::string> parameter_names_;
};

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_SHARD_H_
