// NcclCommunicator: the Communicator for device memory, over NCCL. One per job
// epoch; rank 0 creates the ncclUniqueId and publishes it through the job's
// KvClient (the coordinator's rendezvous), the others fetch it.
//
// Streams and ordering. Every operation is issued, in issue order, on one
// dedicated non-blocking CUDA stream (stream()). Enqueue()'s function runs on
// the calling thread at issue time and must only enqueue device work on
// stream() (e.g. GpuShardOptimizer::EnqueueStep); it then sits between the
// operations issued before and after it on the device, with no host
// synchronisation: Reduce -> owner's step -> Broadcast is one stream.
// The function must not call back into this communicator.
//
// Work handles. Each operation's Work wraps a CUDA event recorded after it.
// IsCompleted() queries the event; Wait(timeout) polls it (and the
// communicator's error state) until it fires, the communicator fails, or the
// timeout passes; OnCompletion callbacks run on a watcher thread that polls
// pending events (never on a CUDA callback thread, so they may call CUDA).
// NcclWork::StreamWait(s) makes another stream (e.g. the compute stream before
// the next forward) wait for the operation on the device, without blocking
// the host.
//
// Setup (nccl_bootstrap.h): the unique id travels through the job's
// rendezvous store; initialisation is non-blocking, polled to the deadline.
// Work handles and the completion watcher: nccl_work.h. Every deadline,
// poll pause and watchdog interval is measured on NcclOptions::clock.
//
// Failure. NCCL runs with blocking = 0: initialisation and every call poll
// ncclCommGetAsyncError with a deadline instead of blocking. A watchdog thread
// polls the same error state; on an asynchronous error (a peer gone, a network
// failure) it aborts the communicator (ncclCommAbort), which releases any
// kernel waiting for a peer. Abort() does the same on request (job cancelled,
// peer lost per the coordinator). After an abort every pending and future
// operation fails with the abort reason; nothing blocks without a deadline.
// An Enqueue'd function that fails aborts the communicator too (its outputs
// can no longer be trusted).
//
// Bytes (bytes_sent): per rank, by the algorithm NCCL uses for large buffers:
// AllReduce (ring) 2(n-1)/n * S, Reduce and Broadcast (ring/pipeline)
// (n-1)/n * S, where S is the buffer size in bytes and n the world size; 0 for
// n = 1; a Barrier is a 4-byte AllReduce. This is the same convention as the
// Gloo backend's, so reduce+broadcast costs 2(n-1)/n * S on either.
#ifndef PSHARD_WORKER_GPU_NCCL_COMMUNICATOR_H_
#define PSHARD_WORKER_GPU_NCCL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_store.h"

// cudaStream_t is `CUstream_st*`; declared here so this header needs no CUDA.
struct CUstream_st;

namespace pshard::worker {

// The Work of an NcclCommunicator operation.
class NcclWork : public Work {
 public:
  // Makes `stream` wait on the device until this operation has finished
  // (cudaStreamWaitEvent); returns at once. If the operation already failed
  // (or was never issued), returns that status and adds no wait.
  virtual absl::Status StreamWait(CUstream_st* stream) = 0;
};

// Makes `stream` wait for `work` when it is an NcclWork (device-side, no host
// block); any other Work is waited for on the host with `timeout`.
absl::Status StreamWaitFor(Work& work, CUstream_st* stream,
                           absl::Duration timeout);

class NcclCommunicator : public Communicator {
 public:
  // The communication stream: where operations and Enqueue'd device work run.
  virtual CUstream_st* stream() const = 0;

  // The CUDA device of this rank.
  virtual int device() const = 0;

  // The communicator's sticky failure (OK while healthy).
  virtual absl::Status health() const = 0;
};

struct NcclOptions {
  // Job and epoch: scope the rendezvous key and name the NCCL communicator.
  std::string job_id;
  int64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  // CUDA device of this rank.
  int device = 0;
  // Deadline for the rendezvous, the communicator's initialisation, and for
  // any single NCCL call to be enqueued (JobSpec.collective_timeout_seconds).
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of the rendezvous key (tests sharing one store).
  std::string key_prefix;
  // How often the watchdog polls NCCL's asynchronous error state.
  absl::Duration watchdog_interval = absl::Milliseconds(100);
  // Measures every timeout and pause; must outlive the communicator and
  // every Work handle it returned.
  const Clock* clock = &Clock::Real();
};

// Creates rank `options.rank`'s communicator: publishes (rank 0) or fetches
// the unique id through `kv` (used only during the call), then initialises
// NCCL without blocking, polling until done or options.timeout.
// Errors: InvalidArgument (bad rank, world size or device; no clock),
// Unavailable (no CUDA device; built without CUDA; NCCL system/remote
// errors), DeadlineExceeded (peers did not show up in time), DataLoss (a
// malformed unique id in the store), or the KvClient's error.
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options, KvClient& kv);

// Bytes one rank sends for one operation on `bytes` bytes among
// `world_size` ranks, by the convention above. Exposed for tests and
// benchmarks.
enum class NcclOpKind { kAllReduce, kReduce, kBroadcast };
int64_t NcclBytesSent(NcclOpKind kind, int64_t bytes, int world_size);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_NCCL_COMMUNICATOR_H_
