#include "worker/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/device.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/nccl_bootstrap.h"
#include "worker/gpu/nccl_work.h"

namespace pshard::worker {
namespace {

using gpu::AbortingNcclComm;
using gpu::Backoff;
using gpu::CudaEvent;
using gpu::CudaStatus;
using gpu::CudaStream;
using gpu::DeviceBuffer;
using gpu::NcclCompletionWatcher;
using gpu::NcclFailureState;
using gpu::NcclStatus;
using gpu::NcclWorkImpl;
using gpu::ScopedDevice;

// How long the destructor waits for issued work to drain and for
// ncclCommFinalize before it falls back to ncclCommAbort.
constexpr absl::Duration kTeardownTimeout = absl::Seconds(10);

ncclDataType_t ToNccl(DataType dtype) {
  return dtype == DataType::kFloat32 ? ncclFloat32 : ncclBfloat16;
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(const NcclOptions& options,
                       std::unique_ptr<std::string> name, ncclComm_t comm,
                       CudaStream stream, DeviceBuffer barrier)
      : options_(options),
        clock_(*options.clock),
        name_(std::move(name)),
        stream_(std::move(stream)),
        barrier_(std::move(barrier)),
        shared_(std::make_shared<NcclFailureState>()),
        watcher_(std::make_shared<NcclCompletionWatcher>(options.device,
                                                         options.clock)),
        comm_(comm) {
    watcher_->Start();
    watchdog_ = std::thread([this] { RunWatchdog(); });
  }

  ~NcclCommunicatorImpl() override {
    {
      absl::MutexLock lock(&watchdog_mu_);
      stop_watchdog_ = true;
    }
    watchdog_.join();
    {
      ScopedDevice scoped(options_.device);
      absl::MutexLock lock(&issue_mu_);
      if (comm_ != nullptr && !shared_->failed()) {
        // Normal end: let issued work finish, then finalize (flush) and
        // destroy. Any trouble, or a deadline, falls back to abort.
        absl::Status status = DrainLocked();
        if (status.ok()) {
          const ncclResult_t r = ncclCommFinalize(comm_);
          status = NcclStatus(r, comm_, "ncclCommFinalize");
          if (status.ok() && r == ncclInProgress) {
            status = AwaitNcclLocked(kTeardownTimeout, "ncclCommFinalize");
          }
        }
        if (status.ok()) {
          (void)ncclCommDestroy(comm_);
          comm_ = nullptr;
        } else {
          shared_->Fail(status);
        }
      }
      if (comm_ != nullptr) {
        (void)ncclCommAbort(comm_);
        comm_ = nullptr;
      }
    }
    watcher_->Shutdown();
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  CUstream_st* stream() const override { return stream_.get(); }
  int device() const override { return options_.device; }
  absl::Status health() const override {
    return shared_->failed() ? shared_->failure() : absl::OkStatus();
  }
  int64_t bytes_sent() const override { return bytes_sent_.load(); }

  std::shared_ptr<Work> AllReduce(void* data, int64_t count,
                                  DataType dtype) override {
    return Collective(NcclOpKind::kAllReduce, {{data, count, 0}}, dtype);
  }

  std::shared_ptr<Work> Reduce(void* data, int64_t count, DataType dtype,
                               int root) override {
    return Collective(NcclOpKind::kReduce, {{data, count, root}}, dtype);
  }

  // On the device. Over a power-of-two world, ncclAvg: the division inside
  // the reduction (NCCL sums x_i * (1/n), as DDP's pre-division does; an
  // exact scaling there, so the host's sum / n). Otherwise 1/n itself is
  // rounded (bf16(1/3) is 0.2% high, and would scale every averaged bf16
  // gradient): ncclSum, then the root divides as the host does
  // (DivideInPlace). The mean over one rank is its input: an in-place
  // ncclSum there is free, where ncclAvg would still run a pass.
  std::shared_ptr<Work> ReduceMean(void* data, int64_t count, DataType dtype,
                                   int root) override {
    return Collective(NcclOpKind::kReduce, {{data, count, root}}, dtype,
                      /*mean=*/options_.world_size > 1);
  }

  std::shared_ptr<Work> Broadcast(void* data, int64_t count, DataType dtype,
                                  int root) override {
    return Collective(NcclOpKind::kBroadcast, {{data, count, root}}, dtype);
  }

  // One ncclGroupStart/End around the segments' operations: NCCL launches
  // them together (one kernel per group, not one per segment), so a SHARDED
  // round's world_size reductions cost one launch, as a reduce-scatter.
  std::shared_ptr<Work> IssueGroup(
      CollectiveKind kind, absl::Span<const CollectiveSegment> segments,
      DataType dtype) override {
    switch (kind) {
      case CollectiveKind::kAllReduce:
        return Collective(NcclOpKind::kAllReduce, segments, dtype);
      case CollectiveKind::kReduceMean:
        return Collective(NcclOpKind::kReduce, segments, dtype,
                          /*mean=*/options_.world_size > 1);
      case CollectiveKind::kBroadcast:
      default:
        return Collective(NcclOpKind::kBroadcast, segments, dtype);
    }
  }

  std::shared_ptr<Work> Barrier() override {
    return Collective(NcclOpKind::kAllReduce, {{barrier_.get(), 1, 0}},
                      DataType::kFloat32);
  }

  std::shared_ptr<Work> Enqueue(std::function<absl::Status()> fn) override {
    ScopedDevice scoped(options_.device);
    if (!scoped.status().ok()) return FailAndReturn(scoped.status());
    absl::MutexLock lock(&issue_mu_);
    if (shared_->failed()) return NcclWorkImpl::Done(shared_->failure());
    absl::Status status =
        fn ? fn() : absl::InvalidArgumentError("Enqueue of an empty function");
    if (!status.ok()) {
      shared_->Fail(status);
      FinishAbortLocked();
      return NcclWorkImpl::Done(status);
    }
    return RecordLocked("Enqueue");
  }

  void Abort(const absl::Status& reason) override {
    shared_->Fail(reason.ok() ? absl::AbortedError("NCCL communicator aborted")
                              : reason);
    // Never block here: Abort may come from inside an Enqueue'd function or
    // from a callback. Whoever holds the issue lock (an issuing thread, or
    // the watchdog within one interval) performs the ncclCommAbort.
    if (issue_mu_.TryLock()) {
      FinishAbortLocked();
      issue_mu_.Unlock();
    }
  }

 private:
  std::shared_ptr<Work> FailAndReturn(absl::Status status) {
    shared_->Fail(status);
    if (issue_mu_.TryLock()) {
      FinishAbortLocked();
      issue_mu_.Unlock();
    }
    return NcclWorkImpl::Done(std::move(status));
  }

  // `kind` on every segment, in order; more than one segment as one NCCL
  // group. `mean` (kReduce only): each root receives the average of its
  // segment (see ReduceMean).
  std::shared_ptr<Work> Collective(NcclOpKind kind,
                                   absl::Span<const CollectiveSegment> segments,
                                   DataType dtype, bool mean = false) {
    const char* op = kind == NcclOpKind::kAllReduce ? "ncclAllReduce"
                     : kind == NcclOpKind::kReduce  ? "ncclReduce"
                                                    : "ncclBroadcast";
    // Unlike the host backends, where a bad argument fails only its
    // operation: a rank that skips an NCCL collective leaves its peers'
    // kernels waiting on the device, which only ncclCommAbort releases. So
    // a bad argument fails the communicator.
    for (const CollectiveSegment& segment : segments) {
      if (absl::Status args = CheckCollectiveArgs(
              segment.data, segment.count, segment.root, options_.world_size);
          !args.ok()) {
        return FailAndReturn(absl::Status(
            args.code(), absl::StrCat(op, " on rank ", options_.rank, ": ",
                                      args.message())));
      }
    }
    ScopedDevice scoped(options_.device);
    if (!scoped.status().ok()) return FailAndReturn(scoped.status());
    absl::MutexLock lock(&issue_mu_);
    if (shared_->failed()) return NcclWorkImpl::Done(shared_->failure());
    cudaStream_t s = stream_.get();
    const int world = options_.world_size;
    const bool divide_at_root = mean && (world & (world - 1)) != 0;
    const bool grouped = segments.size() > 1;
    absl::Status status =
        grouped ? NcclStatus(ncclGroupStart(), comm_, "ncclGroupStart")
                : absl::OkStatus();
    // Non-blocking mode: ncclInProgress means the operation is not on the
    // stream yet (e.g. connections being set up on first use); inside a
    // group, ncclGroupEnd says so for the group.
    bool in_progress = false;
    const ncclRedOp_t reduce_op = mean && !divide_at_root ? ncclAvg : ncclSum;
    for (const CollectiveSegment& segment : segments) {
      if (!status.ok()) break;
      const ncclResult_t r = LaunchLocked(kind, segment, dtype, reduce_op);
      status = NcclStatus(r, comm_, op);
      in_progress = in_progress || r == ncclInProgress;
    }
    if (grouped) {
      // A group once opened is closed, whatever failed inside it.
      const ncclResult_t end = ncclGroupEnd();
      const absl::Status ended = NcclStatus(end, comm_, "ncclGroupEnd");
      if (status.ok()) status = ended;
      in_progress = in_progress || end == ncclInProgress;
    }
    // The event must be recorded after the operations: wait until NCCL is
    // done issuing them.
    if (status.ok() && in_progress) {
      status = AwaitNcclLocked(options_.timeout, op);
    }
    for (const CollectiveSegment& segment : segments) {
      if (!status.ok()) break;
      if (!divide_at_root || segment.root != options_.rank) continue;
      status = CudaStatus(
          gpu::LaunchDivide(segment.data,
                            dtype == DataType::kBFloat16 ? gpu::kKernelBFloat16
                                                         : gpu::kKernelFloat32,
                            segment.count, static_cast<float>(world), s),
          absl::StrCat(op, ": the mean's division"));
    }
    if (!status.ok()) {
      shared_->Fail(status);
      FinishAbortLocked();
      return NcclWorkImpl::Done(status);
    }
    for (const CollectiveSegment& segment : segments) {
      bytes_sent_.fetch_add(NcclBytesSent(
          kind, segment.count * DataTypeSize(dtype), options_.world_size));
    }
    return RecordLocked(op);
  }

  // Issues `kind` on one segment, in place, on the communicator's stream
  // (`reduce_op` for kReduce).
  ncclResult_t LaunchLocked(NcclOpKind kind, const CollectiveSegment& segment,
                            DataType dtype, ncclRedOp_t reduce_op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    void* data = segment.data;
    const size_t n = static_cast<size_t>(segment.count);
    cudaStream_t s = stream_.get();
    switch (kind) {
      case NcclOpKind::kAllReduce:
        return ncclAllReduce(data, data, n, ToNccl(dtype), ncclSum, comm_, s);
      case NcclOpKind::kReduce:
        return ncclReduce(data, data, n, ToNccl(dtype), reduce_op,
                          segment.root, comm_, s);
      case NcclOpKind::kBroadcast:
      default:
        return ncclBroadcast(data, data, n, ToNccl(dtype), segment.root, comm_,
                             s);
    }
  }

  // Records an event after everything issued so far and returns its Work.
  std::shared_ptr<Work> RecordLocked(absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    absl::StatusOr<CudaEvent> event =
        CudaEvent::Create(absl::StrCat(what, ": cudaEventCreate"));
    absl::Status status = event.status();
    if (status.ok()) {
      status = CudaStatus(cudaEventRecord(event->get(), stream_.get()),
                          absl::StrCat(what, ": cudaEventRecord"));
    }
    if (!status.ok()) {
      shared_->Fail(status);
      FinishAbortLocked();
      return NcclWorkImpl::Done(status);
    }
    FinishAbortLocked();  // an Abort() may have arrived meanwhile
    return std::make_shared<NcclWorkImpl>(shared_, watcher_, options_.device,
                                          *std::move(event), &clock_);
  }

  // Polls ncclCommGetAsyncError until NCCL is no longer in progress, for at
  // most `timeout`, or until a failure (an Abort) is recorded.
  absl::Status AwaitNcclLocked(absl::Duration timeout, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    const absl::Time deadline = clock_.Now() + timeout;
    Backoff backoff(clock_);
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) {
        return NcclStatus(r, comm_,
                          absl::StrCat(what, ": ncclCommGetAsyncError"));
      }
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclStatus(state, comm_, what);
      if (shared_->failed()) return shared_->failure();
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " on rank ", options_.rank, " of ",
                         options_.world_size, " was still in progress after ",
                         absl::FormatDuration(timeout)));
      }
      backoff.Pause();
    }
  }

  // Waits (polling, with a deadline) for everything issued on the stream;
  // an Abort() meanwhile ends the wait with its failure.
  absl::Status DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create("drain"));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(event.get(), stream_.get()),
                               "drain: cudaEventRecord"));
    const absl::Time deadline = clock_.Now() + kTeardownTimeout;
    Backoff backoff(clock_);
    while (true) {
      const cudaError_t err = gpu::QueryEvent(event.get());
      if (err == cudaSuccess) return absl::OkStatus();
      if (err != cudaErrorNotReady) return CudaStatus(err, "drain");
      if (shared_->failed()) return shared_->failure();
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(
            "NCCL communicator teardown: issued work did not finish");
      }
      backoff.Pause();
    }
  }

  // Aborts the NCCL communicator once a failure is recorded (idempotent).
  void FinishAbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    if (comm_ != nullptr && shared_->failed()) {
      ScopedDevice scoped(options_.device);
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  // Returns true when the destructor asked the watchdog to stop, after at
  // most one interval on the clock.
  bool WatchdogStopsWithin(absl::Duration interval) {
    absl::MutexLock lock(&watchdog_mu_);
    const auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchdog_mu_) {
      return stop_watchdog_;
    };
    return clock_.AwaitWithTimeout(watchdog_mu_, absl::Condition(&stop),
                                   interval);
  }

  void RunWatchdog() {
    (void)cudaSetDevice(options_.device);
    while (!WatchdogStopsWithin(options_.watchdog_interval)) {
      absl::MutexLock lock(&issue_mu_);
      if (comm_ != nullptr && !shared_->failed()) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) {
          shared_->Fail(NcclStatus(r, comm_, "NCCL watchdog"));
        } else if (state != ncclSuccess && state != ncclInProgress) {
          shared_->Fail(NcclStatus(
              state, comm_,
              absl::StrCat("NCCL asynchronous error on rank ", options_.rank,
                           " of ", options_.world_size)));
        }
      }
      FinishAbortLocked();
    }
  }

  const NcclOptions options_;
  const Clock& clock_;  // options_.clock
  const std::unique_ptr<std::string> name_;  // NCCL's config points at it
  const CudaStream stream_;
  const DeviceBuffer barrier_;  // one float for Barrier()
  const std::shared_ptr<NcclFailureState> shared_;
  const std::shared_ptr<NcclCompletionWatcher> watcher_;
  std::atomic<int64_t> bytes_sent_{0};

  // Serialises every NCCL call on comm_ (NCCL communicators are not
  // thread-safe) and fixes the issue order of operations on the stream.
  absl::Mutex issue_mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(issue_mu_);

  absl::Mutex watchdog_mu_;
  bool stop_watchdog_ ABSL_GUARDED_BY(watchdog_mu_) = false;
  std::thread watchdog_;
};

}  // namespace

absl::Status StreamWaitFor(Work& work, CUstream_st* stream,
                           absl::Duration timeout) {
  if (auto* nccl = dynamic_cast<NcclWork*>(&work)) {
    return nccl->StreamWait(stream);
  }
  return work.Wait(timeout);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options, KvClient& kv) {
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("NCCL communicator: no clock");
  }
  const absl::Time deadline = options.clock->Now() + options.timeout;
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: rank ", options.rank,
                     " is not in a world of size ", options.world_size));
  }
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) {
    return absl::UnavailableError(
        absl::StrCat("NCCL communicator: no CUDA device: ", why));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: CUDA device ", options.device,
                     " does not exist (", count, " present)"));
  }
  ScopedDevice scoped(options.device);
  RETURN_IF_ERROR(scoped.status());

  ASSIGN_OR_RETURN(const ncclUniqueId id,
                   gpu::ExchangeNcclUniqueId(options, kv, deadline));
  auto name = std::make_unique<std::string>(
      absl::StrCat("pshard/", options.job_id, "/", options.epoch));
  ASSIGN_OR_RETURN(AbortingNcclComm comm,
                   gpu::InitNcclComm(options, id, *name, deadline));

  const std::string scope = gpu::NcclScope(options);
  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(absl::StrCat(
                                          scope, ": communication stream")));
  ASSIGN_OR_RETURN(
      DeviceBuffer barrier,
      DeviceBuffer::Allocate(sizeof(float), absl::StrCat(scope, ": barrier")));
  // Zeroed on the communication stream, which does not wait for the legacy
  // default stream's cudaMemset.
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(barrier.get(), 0, sizeof(float), stream.get()),
      absl::StrCat(scope, ": barrier")));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream.get()),
                             absl::StrCat(scope, ": barrier")));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicatorImpl(options, std::move(name), comm.release(),
                               std::move(stream), std::move(barrier)));
}

}  // namespace pshard::worker
