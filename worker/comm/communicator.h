// Communicator: the collective operations the ZeRO hook needs, asynchronous,
// on flat buffers, with an explicit abort. Backends: GlooCommunicator (host
// memory, TCP and shared memory), NcclCommunicator (device memory, its own
// CUDA stream), and FakeCommunicator (in-process, for tests). The two host
// backends are one op pipeline (link_communicator.h) over different links.
//
// Ordering: every rank issues the same operations in the same order. Each
// operation's effects are ordered after every operation issued before it on
// the same communicator and before every operation issued after it. Enqueue()
// places host code into that order, which is how a bucket's owner runs its
// optimizer step "inside the reduction's completion" and before the broadcast:
//
//   comm.Reduce(grad, owner);            // 1
//   if (rank == owner) comm.Enqueue(step);  // 2: sees the reduced gradient
//   comm.Broadcast(params, owner);       // 3: sends the stepped parameters
//
// On host backends Enqueue's function runs on the communicator's thread after
// op 1 completes; on NCCL it runs at issue time and must only enqueue device
// work on the communicator's stream, so no host synchronisation is needed.
#ifndef PSHARD_WORKER_COMM_COMMUNICATOR_H_
#define PSHARD_WORKER_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace pshard::worker {

enum class DataType { kFloat32, kBFloat16 };

// Size of one element of `dtype` in bytes.
inline int64_t DataTypeSize(DataType dtype) {
  return dtype == DataType::kFloat32 ? 4 : 2;
}

// A handle on one asynchronous operation (cf. c10d's Work, with Status instead
// of exceptions). Thread-safe.
class Work {
 public:
  virtual ~Work() = default;

  // True once the operation has finished, successfully or not.
  virtual bool IsCompleted() = 0;

  // Blocks until the operation finishes or `timeout` passes. Returns the
  // operation's status; DeadlineExceeded if it did not finish in time
  // (the operation is not cancelled: Abort() the communicator for that).
  virtual absl::Status Wait(absl::Duration timeout) = 0;

  // Calls `done` exactly once with the operation's status when it finishes,
  // at once (on the caller's thread) if it already has. May run on the
  // communicator's thread: keep it short and never block on other Work.
  virtual void OnCompletion(std::function<void(absl::Status)> done) = 0;
};

// The collectives a Communicator can issue as a group (IssueGroup).
enum class CollectiveKind { kAllReduce, kReduceMean, kBroadcast };

// One operation of a group: `count` elements at `data`, with its own root
// (ignored by kAllReduce).
struct CollectiveSegment {
  void* data = nullptr;
  int64_t count = 0;
  int root = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Element-wise sum of `count` elements at `data` across all ranks, in
  // place, on every rank.
  virtual std::shared_ptr<Work> AllReduce(void* data, int64_t count,
                                          DataType dtype) = 0;

  // Element-wise sum across all ranks into `data` on `root`; the contents of
  // `data` on other ranks are unspecified afterwards.
  virtual std::shared_ptr<Work> Reduce(void* data, int64_t count,
                                       DataType dtype, int root) = 0;

  // Like Reduce, but `root` ends with the element-wise mean, as DDP averages
  // gradients, computed where the data lives and without a pass of its own:
  // the host backends divide the sum by world_size() in the last addition;
  // NCCL uses ncclAvg for world sizes that are powers of two (it sums
  // x_i * (1/n) on the device, DDP's pre-division, an exact scaling there)
  // and otherwise a sum the root divides on the device, as the host does.
  virtual std::shared_ptr<Work> ReduceMean(void* data, int64_t count,
                                           DataType dtype, int root) = 0;

  // Copies `count` elements at `data` on `root` to `data` on every rank.
  virtual std::shared_ptr<Work> Broadcast(void* data, int64_t count,
                                          DataType dtype, int root) = 0;

  // Completes once every rank has issued it.
  virtual std::shared_ptr<Work> Barrier() = 0;

  // Issues `kind` on every segment, in order, as consecutive operations (the
  // same on every rank), and returns one Work that completes when all have.
  // One root per segment makes a reduce-scatter or an all-gather over uneven
  // ranges (the SHARDED policy's rounds). A backend may launch a group at
  // once: NCCL issues it as one ncclGroupStart/End (one kernel launch instead
  // of one per segment); the default issues the operations one by one.
  virtual std::shared_ptr<Work> IssueGroup(
      CollectiveKind kind, absl::Span<const CollectiveSegment> segments,
      DataType dtype);

  // Runs `fn` in this communicator's operation order (see the file comment).
  // The returned Work carries fn's status; a failing fn fails later
  // operations too, since their inputs can no longer be trusted.
  virtual std::shared_ptr<Work> Enqueue(std::function<absl::Status()> fn) = 0;

  // A span of memory that an Enqueue'd function reads or writes.
  struct MemoryRange {
    const void* data = nullptr;
    int64_t bytes = 0;
  };

  // Like Enqueue(fn), with a promise that `fn` touches only `ranges`: a
  // backend may then start later operations on other memory while `fn` runs
  // (the owner's optimizer step on one bucket overlaps the transfer of the
  // next). `fn` still runs after every earlier operation, and later operations
  // on any of `ranges` still start after it. The default ignores the promise.
  virtual std::shared_ptr<Work> EnqueueTouching(
      std::function<absl::Status()> fn, std::vector<MemoryRange> ranges) {
    (void)ranges;
    return Enqueue(std::move(fn));
  }

  // Fails every pending and future operation with `reason` and releases any
  // thread blocked in a collective. Idempotent; safe from any thread.
  virtual void Abort(const absl::Status& reason) = 0;

  // Payload bytes this rank has sent over the transport since creation.
  virtual int64_t bytes_sent() const = 0;
};

// The argument checks every backend makes before it issues a collective:
// InvalidArgument if `count` is negative, `root` is not a rank of a world of
// `world_size`, or `data` is null with a non-zero `count`. (Collectives
// without a root pass 0.)
absl::Status CheckCollectiveArgs(const void* data, int64_t count, int root,
                                 int world_size);

// Divides `count` elements at `data` (host memory) by `divisor` in place
// (bf16 through fp32, rounding to nearest even).
void DivideInPlace(void* data, int64_t count, DataType dtype, float divisor);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_COMMUNICATOR_H_
