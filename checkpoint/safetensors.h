// The safetensors file format (https://github.com/huggingface/safetensors),
// streamed: an 8-byte little-endian header length N, N bytes of JSON
//
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"<key>": "<string value>"}}
//
// (offsets relative to the first byte after the header), then the raw
// little-endian tensor bytes, contiguous and in offset order.
//
// SafetensorsWriter streams tensors to disk one at a time (memory is never
// more than what the caller passes to one Append) and publishes the file
// atomically; SafetensorsReader validates the whole header against the file
// before any data is trusted, then reads single tensors by name. Every error
// names the file and what is wrong, so a truncated, corrupted or hostile file
// yields an error, never a crash or an unbounded allocation.
#ifndef PSHARD_CHECKPOINT_SAFETENSORS_H_
#define PSHARD_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "checkpoint/file.h"
#include "checkpoint/sha256.h"

namespace pshard::checkpoint {

// Limits enforced when reading.
inline constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;
inline constexpr int kMaxSafetensorsRank = 64;

// The element types of the format, named as in its header ("F32", "BF16").
enum class DType {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kF64, kI64, kU64,
};
absl::string_view DTypeName(DType dtype);
int64_t DTypeSize(DType dtype);
// InvalidArgument naming `name` when it is not a dtype of the format.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// One tensor of a file's header, validated against the file.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t begin = 0;  // data_offsets, relative to the data section
  int64_t end = 0;
  int64_t byte_size() const { return end - begin; }
};

// A validated header: tensors in offset order (contiguous, covering the
// whole data section) and the string metadata.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // absolute offset of the data section
};

// Validates a whole file image held in memory; `source` names it in errors.
// InvalidArgument on any malformation (see SafetensorsReader::Open).
absl::StatusOr<SafetensorsHeader> ParseSafetensorsImage(
    absl::string_view bytes, absl::string_view source);

// A safetensors file open for reading tensors by name.
class SafetensorsReader {
 public:
  // Opens and validates `path`: header length within the limit and the file,
  // well-formed JSON, every entry with a known dtype, a shape whose size
  // matches its data_offsets, offsets in range, non-overlapping and
  // contiguous, and the data section ending exactly at the end of the file.
  // NotFound: no such file. InvalidArgument: malformed (the message names
  // the file, the tensor and what is wrong). Internal: I/O errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(
      const std::string& path);

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const {
    return header_.metadata;
  }
  // nullptr when the file holds no tensor of that name.
  const TensorInfo* Find(absl::string_view name) const;

  // Reads `tensor` (one of tensors()) into `out`, which must hold exactly its
  // byte_size(). InvalidArgument: wrong size, or the file changed under us.
  absl::Status ReadInto(const TensorInfo& tensor, absl::Span<char> out) const;
  // The same, into a new buffer. NotFound naming the tensor and the file.
  absl::StatusOr<std::string> ReadBytes(absl::string_view name) const;

 private:
  SafetensorsReader(std::string path, UniqueFd fd, int64_t file_size,
                    SafetensorsHeader header);

  std::string path_;
  UniqueFd fd_;
  int64_t file_size_;
  SafetensorsHeader header_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> tensors()
};

// What a writer is told up front: the header comes before the data.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// The length prefix and JSON header for `specs` (data in the given order,
// header padded with spaces to 8 bytes as the reference writer does).
// InvalidArgument: an empty, reserved or repeated name, a negative
// dimension, or a tensor too large to address.
absl::StatusOr<std::string> SerializeSafetensorsHeader(
    absl::Span<const TensorSpec> specs,
    const std::map<std::string, std::string>& metadata);

// Streams one safetensors file to disk through a temporary beside `path`.
//
//   ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, specs, {}));
//   for (...) RETURN_IF_ERROR(writer->Append(bytes_of_next_tensor));
//   ASSIGN_OR_RETURN(FileDigest digest, writer->Finish());
//
// Nothing is visible at `path` until Finish() succeeds; a writer destroyed
// before that (or after any error) removes its temporary.
class SafetensorsWriter {
 public:
  // Writes the header. InvalidArgument as SerializeSafetensorsHeader; I/O
  // errors as ErrnoError (ResourceExhausted for a full disk), naming `path`.
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, std::vector<TensorSpec> specs,
      const std::map<std::string, std::string>& metadata);

  // Appends the next bytes of the data section (the tensors' bytes in spec
  // order, in pieces of any size). InvalidArgument past the declared size;
  // I/O errors name `path`. Any error makes the writer unusable.
  absl::Status Append(absl::string_view bytes);

  // fsyncs, renames over `path`, fsyncs the directory; returns the file's
  // size and SHA-256. FailedPrecondition when fewer bytes than declared were
  // appended (naming the first tensor short of data).
  absl::StatusOr<FileDigest> Finish();

  const std::string& path() const { return file_.path(); }

 private:
  SafetensorsWriter(AtomicFile file, std::vector<TensorSpec> specs,
                    int64_t data_size, Sha256 hash, int64_t header_size);

  AtomicFile file_;
  std::vector<TensorSpec> specs_;
  int64_t data_size_;
  int64_t written_ = 0;
  Sha256 hash_;
  int64_t header_size_;
  absl::Status status_;  // the first error; sticks
};

// Number of elements of `shape`, or InvalidArgument (negative dimension, or
// more than `max_bytes / element_size` elements) naming `what`.
absl::StatusOr<int64_t> CheckedNumel(absl::Span<const int64_t> shape,
                                     int64_t element_size, int64_t max_bytes,
                                     absl::string_view what);

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_SAFETENSORS_H_
