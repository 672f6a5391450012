// Checkpoint writes that overlap training: Start() copies the rank's
// tensors (the snapshot; its duration is the whole stall training sees) and
// returns, and a background thread streams the copy to disk through
// CheckpointWriter::WriteShard. The result comes back through a status the
// caller polls (IsCompleted) or waits on (Wait, with a deadline), in the
// shape of c10d's Work.
//
//   AsyncCheckpointWriter async(*std::move(writer), Clock::Real());
//   RETURN_IF_ERROR(async.Start(step, parameters));  // copies, returns
//   ... train on; parameters may change now ...
//   absl::StatusOr<ShardFileInfo> file = async.Wait(absl::Minutes(5));
//
// The snapshot's buffers are kept after a write and reused by the next
// Start() of the same shapes, so steady-state memory is one extra copy of
// the rank's state and the stall is one memcpy of it.
//
// A write that fails (a full disk: ResourceExhausted naming the file) leaves
// no file at the shard's final name and never touches other checkpoints, so
// the previous complete checkpoint stays the latest one.
//
// States: IDLE --Start--> WRITING --(write ends)--> DONE --Wait/Start--> ...
// One write at a time: Start() during WRITING is FailedPrecondition; Start()
// in DONE discards the unread result.
#ifndef PSHARD_CHECKPOINT_ASYNC_WRITER_H_
#define PSHARD_CHECKPOINT_ASYNC_WRITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/shard.h"
#include "common/clock.h"

namespace pshard::checkpoint {

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter(CheckpointWriter writer, const Clock& clock);
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;
  // Lets a write in flight finish (a half-written temporary is removed
  // either way), then stops the thread.
  ~AsyncCheckpointWriter();

  // Snapshots `parameters` (and `program_state`, stored with them: see
  // WriteShard) and queues their write as step `step`. Called from one
  // thread (the training loop's); the others may be called from any.
  // FailedPrecondition: a write is still in flight. InvalidArgument: as
  // WriteShard (checked before the copy).
  absl::Status Start(int64_t step, absl::Span<const ParameterTensors> parameters,
                     std::optional<std::string> program_state = std::nullopt);

  // A tensor of a snapshot that the caller fills itself.
  struct TensorShape {
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
  };
  struct EntryLayout {
    std::string name;
    TensorShape value;
    std::vector<std::pair<std::string, TensorShape>> state;  // (state name, shape)
    // Set when the entry is a slice of the parameter (ParameterTensors).
    std::optional<TensorSlice> slice;
  };
  // Copies entry `entry` into `buffers`: its value, then its state tensors
  // in layout order, each of its shape's size in bytes.
  using FillFunction = absl::FunctionRef<absl::Status(
      int entry, absl::Span<const absl::Span<char>> buffers)>;
  // As above, but the copy is `fill`'s, straight from wherever the tensors
  // live (device memory, optimizer buckets a parameter is split across):
  // one pass over the rank's state and no intermediate copy. An error of
  // `fill` is returned and nothing is queued. InvalidArgument also for a
  // negative dimension.
  absl::Status Start(int64_t step, absl::Span<const EntryLayout> layout,
                     FillFunction fill,
                     std::optional<std::string> program_state = std::nullopt);

  // True when no write is in flight.
  bool IsCompleted() const;

  // Waits up to `timeout` for the write in flight and returns its result
  // (the manifest entry, or the write's error). DeadlineExceeded: still
  // writing. FailedPrecondition: nothing was started since the last result
  // was taken.
  absl::StatusOr<ShardFileInfo> Wait(absl::Duration timeout);

  // How long the last Start() spent copying: the stall added to training.
  absl::Duration last_snapshot_duration() const;

 private:
  // One tensor's copy (uninitialised storage: the copy is the only pass).
  struct TensorCopy {
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    std::unique_ptr<char[]> bytes;
    size_t size = 0;
    TensorRef ref() const;
  };
  struct ParameterCopy {
    std::string name;
    TensorCopy value;
    std::vector<std::pair<std::string, TensorCopy>> state;
    std::optional<TensorSlice> slice;
  };
  struct Snapshot {
    int64_t step = 0;
    std::vector<ParameterCopy> parameters;
    std::optional<std::string> program_state;
  };
  // Storage for a tensor of `shape`: the next buffer of `spare` when it has
  // the same size (a checkpoint of the same model: the copy then touches no
  // fresh pages, so the stall is a plain memcpy), else a new one.
  static TensorCopy Allocate(const TensorShape& shape,
                             std::vector<TensorCopy>& spare, size_t& next_spare);
  static std::vector<ParameterTensors> Views(const Snapshot& snapshot);
  // The snapshot's storage, for spare_.
  static std::vector<TensorCopy> Buffers(Snapshot snapshot);
  void Run();
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NotWriting() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CheckpointWriter writer_;
  const Clock& clock_;
  mutable absl::Mutex mu_;
  std::optional<Snapshot> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<ShardFileInfo>> result_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration last_snapshot_ ABSL_GUARDED_BY(mu_);
  // The buffers of the last written snapshot, for the next Start() to reuse.
  std::vector<TensorCopy> spare_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after every field is ready
};

}  // namespace pshard::checkpoint

#endif  // PSHARD_CHECKPOINT_ASYNC_WRITER_H_
