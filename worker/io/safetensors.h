// Reading and writing safetensors files (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
// the byte after the header), then the raw tensor bytes.
//
// This is the fp32, whole-file view of checkpoint/safetensors.h (the one
// implementation of the format, with streaming, every dtype and metadata).
// pshard moves only fp32 tensors here: the replay workload reads parameters and
// gradients this way, and a job's final parameters are written this way. Every
// field of a file is validated before any data is trusted, so a malformed or
// hostile file yields an error, never a crash or an unbounded allocation.
#ifndef PSHARD_WORKER_IO_SAFETENSORS_H_
#define PSHARD_WORKER_IO_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "checkpoint/safetensors.h"

namespace pshard::worker {

// Limits enforced when reading (checkpoint/safetensors.h's).
inline constexpr int64_t kMaxSafetensorsHeaderBytes =
    checkpoint::kMaxSafetensorsHeaderBytes;
inline constexpr int kMaxSafetensorsRank = checkpoint::kMaxSafetensorsRank;

// An fp32 tensor read from a file.
struct SafetensorsTensor {
  std::string name;
  std::string dtype = "F32";  // always "F32": other dtypes are rejected
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

// A tensor to write, by reference to memory the caller keeps alive.
struct SafetensorsTensorView {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> data;  // product(shape) elements
};

// Reads every tensor of the file at `path`, ordered by data offset.
// NotFound: no such file. InvalidArgument: malformed file (truncated, header
// too large or not the expected JSON, offsets out of range, overlapping or
// not contiguous, size not matching the shape or the file), or a tensor whose dtype is not F32 (the
// message names the file and the tensor). Internal: I/O errors.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(
    const std::string& path);

// The same for a file already in memory; `source` names it in messages.
absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(
    absl::string_view bytes, absl::string_view source = "<memory>");

// Writes `tensors` (data in the given order, header padded to 8 bytes) to a
// temporary file in the directory of `path`, fsyncs it, renames it over
// `path` and fsyncs the directory: readers see the old file or the complete
// new one, never a partial one. InvalidArgument: empty or duplicate names, or
// data size not matching the shape. Internal: I/O errors (the temporary file
// is removed).
absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensorView> tensors);
absl::Status WriteSafetensorsAtomic(
    const std::string& path, absl::Span<const SafetensorsTensor> tensors);

// The bytes WriteSafetensorsAtomic would write.
absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const SafetensorsTensorView> tensors);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_IO_SAFETENSORS_H_
