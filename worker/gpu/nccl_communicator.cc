#include "worker/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_status.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/device.h"

namespace pshard::worker {
namespace {

using gpu::Backoff;
using gpu::CudaEvent;
using gpu::CudaStatus;
using gpu::CudaStream;
using gpu::DeviceBuffer;
using gpu::ScopedDevice;

// How long the destructor waits for issued work to drain and for
// ncclCommFinalize before it falls back to ncclCommAbort.
constexpr absl::Duration kTeardownTimeout = absl::Seconds(10);

// The status of an NCCL call; see gpu::NcclResultToStatus.
absl::Status NcclStatus(ncclResult_t result, ncclComm_t comm,
                        absl::string_view context) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const char* last = ncclGetLastError(comm);
  return gpu::NcclResultToStatus(static_cast<int>(result),
                                 ncclGetErrorString(result),
                                 last == nullptr ? "" : last, context);
}

ncclDataType_t ToNccl(DataType dtype) {
  return dtype == DataType::kFloat32 ? ncclFloat32 : ncclBfloat16;
}


// The communicator's failure state, shared with Work handles (which may
// outlive the communicator). The first failure wins and is sticky.
class SharedState {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  absl::Status failure() const {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

  // Records `status` (not OK) as the failure unless one is recorded already.
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return;
    failure_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }

 private:
  std::atomic<bool> failed_{false};
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

class CompletionWatcher;

class NcclWorkImpl final : public NcclWork,
                           public std::enable_shared_from_this<NcclWorkImpl> {
 public:
  // An issued operation: done when `event` fires or the communicator fails.
  NcclWorkImpl(std::shared_ptr<SharedState> shared,
               std::shared_ptr<CompletionWatcher> watcher, int device,
               CudaEvent event)
      : shared_(std::move(shared)),
        watcher_(std::move(watcher)),
        device_(device),
        event_(std::move(event)) {}

  // An operation that finished (or failed) before reaching the device.
  static std::shared_ptr<NcclWorkImpl> Done(absl::Status status) {
    auto work =
        std::make_shared<NcclWorkImpl>(nullptr, nullptr, -1, CudaEvent());
    absl::MutexLock lock(&work->mu_);
    work->done_ = true;
    work->status_ = std::move(status);
    return work;
  }

  bool IsCompleted() override { return Poll(); }

  absl::Status Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    Backoff backoff;
    while (!Poll()) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("NCCL operation did not finish within ",
                         absl::FormatDuration(timeout)));
      }
      backoff.Pause();
    }
    absl::MutexLock lock(&mu_);
    return status_;
  }

  void OnCompletion(std::function<void(absl::Status)> done) override;

  absl::Status StreamWait(CUstream_st* stream) override {
    {
      absl::MutexLock lock(&mu_);
      if (event_.get() == nullptr || (done_ && !status_.ok())) return status_;
    }
    if (shared_->failed()) return shared_->failure();
    ScopedDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    return CudaStatus(cudaStreamWaitEvent(stream, event_.get(), 0),
                      "cudaStreamWaitEvent");
  }

  // Checks once whether the operation has finished; when it returns true the
  // status is final. After a communicator failure every operation not yet
  // seen to finish fails with it: an aborted NCCL kernel also "finishes".
  bool Poll() {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return true;
    }
    absl::Status status;
    bool finished = false;
    {
      ScopedDevice scoped(device_);
      const cudaError_t err = scoped.status().ok()
                                  ? gpu::QueryEvent(event_.get())
                                  : cudaErrorInvalidDevice;
      if (err == cudaSuccess) {
        finished = true;
        if (shared_->failed()) status = shared_->failure();
      } else if (err == cudaErrorNotReady) {
        if (shared_->failed()) {
          finished = true;
          status = shared_->failure();
        }
      } else {
        // A sticky device error: nothing on this device can be trusted.
        finished = true;
        status = CudaStatus(err, "cudaEventQuery on an NCCL operation");
        shared_->Fail(status);
      }
    }
    if (!finished) return false;
    absl::MutexLock lock(&mu_);
    if (!done_) {
      done_ = true;
      status_ = std::move(status);
    }
    return true;
  }

  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  const std::shared_ptr<SharedState> shared_;
  const std::shared_ptr<CompletionWatcher> watcher_;
  const int device_;
  const CudaEvent event_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Runs OnCompletion callbacks: a thread that polls the events of works with
// pending callbacks. Polling (rather than cudaLaunchHostFunc) because a host
// function enqueued at OnCompletion time would sit behind everything issued
// since the operation, and must not call CUDA, which callbacks may.
class CompletionWatcher {
 public:
  explicit CompletionWatcher(int device) : device_(device) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  // Queues `done` for `work`; false once shut down.
  bool Add(std::shared_ptr<NcclWorkImpl> work,
           std::function<void(absl::Status)> done) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    pending_.push_back(Entry{std::move(work), std::move(done)});
    return true;
  }

  // Stops the thread, then runs every remaining callback: with its status if
  // its operation finished, else Aborted.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    std::vector<Entry> rest;
    {
      absl::MutexLock lock(&mu_);
      rest.swap(pending_);
    }
    for (Entry& e : rest) {
      if (e.work->Poll()) {
        e.done(e.work->status());
      } else {
        e.done(absl::AbortedError(
            "NCCL communicator destroyed before the operation finished"));
      }
    }
  }

 private:
  struct Entry {
    std::shared_ptr<NcclWorkImpl> work;
    std::function<void(absl::Status)> done;
  };

  void Run() {
    // Bind the thread to the device once: event queries never touch (and
    // never create a context on) another GPU.
    (void)cudaSetDevice(device_);
    while (true) {
      std::vector<Entry> batch;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !pending_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (stopping_) return;
        batch.swap(pending_);
      }
      std::vector<Entry> still;
      std::vector<std::pair<Entry, absl::Status>> finished;
      for (Entry& e : batch) {
        if (e.work->Poll()) {
          absl::Status s = e.work->status();
          finished.emplace_back(std::move(e), std::move(s));
        } else {
          still.push_back(std::move(e));
        }
      }
      // Callbacks run without the lock: they may add more callbacks.
      for (auto& [e, s] : finished) e.done(s);
      if (!still.empty()) {
        absl::MutexLock lock(&mu_);
        for (Entry& e : still) pending_.push_back(std::move(e));
      }
      if (finished.empty()) absl::SleepFor(absl::Microseconds(50));
    }
  }

  const int device_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Entry> pending_ ABSL_GUARDED_BY(mu_);
};

void NcclWorkImpl::OnCompletion(std::function<void(absl::Status)> done) {
  if (Poll()) {
    done(status());
    return;
  }
  if (watcher_ == nullptr || !watcher_->Add(shared_from_this(), done)) {
    // The communicator is gone; its teardown drained or aborted everything.
    if (Poll()) {
      done(status());
    } else {
      done(absl::AbortedError(
          "NCCL communicator destroyed before the operation finished"));
    }
  }
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(const NcclOptions& options,
                       std::unique_ptr<std::string> name, ncclComm_t comm,
                       CudaStream stream, DeviceBuffer barrier)
      : options_(options),
        name_(std::move(name)),
        stream_(std::move(stream)),
        barrier_(std::move(barrier)),
        shared_(std::make_shared<SharedState>()),
        watcher_(std::make_shared<CompletionWatcher>(options.device)),
        comm_(comm) {
    watcher_->Start();
    watchdog_ = std::thread([this] { RunWatchdog(); });
  }

  ~NcclCommunicatorImpl() override {
    stop_watchdog_.Notify();
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
            status = AwaitNcclLocked(absl::Now() + kTeardownTimeout,
                                     "ncclCommFinalize");
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
    return Collective(NcclOpKind::kAllReduce, data, count, dtype, 0);
  }

  std::shared_ptr<Work> Reduce(void* data, int64_t count, DataType dtype,
                               int root) override {
    return Collective(NcclOpKind::kReduce, data, count, dtype, root);
  }

  // ncclAvg: the division happens on the device, inside the reduction (for
  // floating types NCCL sums x_i * (1/n), as DDP's pre-division does). The
  // mean over one rank is its input: an in-place ncclSum there is free,
  // where ncclAvg would still run a pass over the buffer.
  std::shared_ptr<Work> ReduceMean(void* data, int64_t count, DataType dtype,
                                   int root) override {
    return Collective(NcclOpKind::kReduce, data, count, dtype, root,
                      /*mean=*/options_.world_size > 1);
  }

  std::shared_ptr<Work> Broadcast(void* data, int64_t count, DataType dtype,
                                  int root) override {
    return Collective(NcclOpKind::kBroadcast, data, count, dtype, root);
  }

  std::shared_ptr<Work> Barrier() override {
    return Collective(NcclOpKind::kAllReduce, barrier_.get(), 1,
                      DataType::kFloat32, 0);
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

  // `mean` (kReduce only): the root receives the average (ncclAvg).
  std::shared_ptr<Work> Collective(NcclOpKind kind, void* data, int64_t count,
                                   DataType dtype, int root,
                                   bool mean = false) {
    const char* op = kind == NcclOpKind::kAllReduce ? "ncclAllReduce"
                     : kind == NcclOpKind::kReduce  ? "ncclReduce"
                                                    : "ncclBroadcast";
    // Unlike the host backends, where a bad argument fails only its
    // operation: a rank that skips an NCCL collective leaves its peers'
    // kernels waiting on the device, which only ncclCommAbort releases. So
    // a bad argument fails the communicator.
    if (absl::Status args =
            CheckCollectiveArgs(data, count, root, options_.world_size);
        !args.ok()) {
      return FailAndReturn(absl::Status(
          args.code(), absl::StrCat(op, " on rank ", options_.rank, ": ",
                                    args.message())));
    }
    ScopedDevice scoped(options_.device);
    if (!scoped.status().ok()) return FailAndReturn(scoped.status());
    absl::MutexLock lock(&issue_mu_);
    if (shared_->failed()) return NcclWorkImpl::Done(shared_->failure());
    const size_t n = static_cast<size_t>(count);
    cudaStream_t s = stream_.get();
    ncclResult_t r;
    switch (kind) {
      case NcclOpKind::kAllReduce:
        r = ncclAllReduce(data, data, n, ToNccl(dtype), ncclSum, comm_, s);
        break;
      case NcclOpKind::kReduce:
        r = ncclReduce(data, data, n, ToNccl(dtype), mean ? ncclAvg : ncclSum,
                       root, comm_, s);
        break;
      case NcclOpKind::kBroadcast:
      default:
        r = ncclBroadcast(data, data, n, ToNccl(dtype), root, comm_, s);
        break;
    }
    absl::Status status = NcclStatus(r, comm_, op);
    // Non-blocking mode: ncclInProgress means the operation is not on the
    // stream yet (e.g. connections being set up on first use). The event
    // must be recorded after it, so wait until NCCL is done issuing.
    if (status.ok() && r == ncclInProgress) {
      status = AwaitNcclLocked(absl::Now() + options_.timeout, op);
    }
    if (!status.ok()) {
      shared_->Fail(status);
      FinishAbortLocked();
      return NcclWorkImpl::Done(status);
    }
    bytes_sent_.fetch_add(
        NcclBytesSent(kind, count * DataTypeSize(dtype), options_.world_size));
    return RecordLocked(op);
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
                                          *std::move(event));
  }

  // Polls ncclCommGetAsyncError until NCCL is no longer in progress.
  absl::Status AwaitNcclLocked(absl::Time deadline, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    Backoff backoff;
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
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " on rank ", options_.rank, " of ",
                         options_.world_size, " was still in progress after ",
                         absl::FormatDuration(options_.timeout)));
      }
      backoff.Pause();
    }
  }

  // Waits (polling, with a deadline) for everything issued on the stream.
  absl::Status DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(issue_mu_) {
    ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create("drain"));
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(event.get(), stream_.get()),
                               "drain: cudaEventRecord"));
    const absl::Time deadline = absl::Now() + kTeardownTimeout;
    Backoff backoff;
    while (true) {
      const cudaError_t err = gpu::QueryEvent(event.get());
      if (err == cudaSuccess) return absl::OkStatus();
      if (err != cudaErrorNotReady) return CudaStatus(err, "drain");
      if (absl::Now() >= deadline) {
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

  void RunWatchdog() {
    (void)cudaSetDevice(options_.device);
    while (!stop_watchdog_.WaitForNotificationWithTimeout(
        options_.watchdog_interval)) {
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
  const std::unique_ptr<std::string> name_;  // NCCL's config points at it
  const CudaStream stream_;
  const DeviceBuffer barrier_;  // one float for Barrier()
  const std::shared_ptr<SharedState> shared_;
  const std::shared_ptr<CompletionWatcher> watcher_;
  std::atomic<int64_t> bytes_sent_{0};

  // Serialises every NCCL call on comm_ (NCCL communicators are not
  // thread-safe) and fixes the issue order of operations on the stream.
  absl::Mutex issue_mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(issue_mu_);

  absl::Notification stop_watchdog_;
  std::thread watchdog_;
};

// Aborts a communicator that never made it into an NcclCommunicatorImpl.
struct CommGuard {
  ncclComm_t comm = nullptr;
  ~CommGuard() {
    if (comm != nullptr) (void)ncclCommAbort(comm);
  }
  ncclComm_t Release() { return std::exchange(comm, nullptr); }
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
  const absl::Time deadline = absl::Now() + options.timeout;
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

  const std::string scope =
      absl::StrCat("job ", options.job_id, " epoch ", options.epoch);
  const std::string key = absl::StrCat(options.key_prefix, "nccl-unique-id/",
                                       options.job_id, "/", options.epoch);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (options.rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), nullptr,
                               absl::StrCat(scope, ": ncclGetUniqueId")));
    RETURN_IF_ERROR(kv.Put(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    ASSIGN_OR_RETURN(
        std::string value,
        kv.Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    if (value.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat(
          scope, ": the NCCL unique id in the rendezvous store has ",
          value.size(), " bytes, expected ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, value.data(), sizeof(id.internal));
  }

  auto name = std::make_unique<std::string>(
      absl::StrCat("pshard/", options.job_id, "/", options.epoch));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name->c_str();
  CommGuard guard;
  const ncclResult_t r = ncclCommInitRankConfig(&guard.comm, options.world_size,
                                                id, options.rank, &config);
  RETURN_IF_ERROR(NcclStatus(r, guard.comm,
                             absl::StrCat(scope, ": ncclCommInitRankConfig")));
  if (guard.comm == nullptr) {
    return absl::InternalError(absl::StrCat(
        scope, ": ncclCommInitRankConfig returned no communicator"));
  }
  // Initialisation proceeds in NCCL's threads; poll it with the deadline.
  Backoff backoff;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(guard.comm, &state);
    RETURN_IF_ERROR(NcclStatus(q, guard.comm,
                               absl::StrCat(scope, ": ncclCommGetAsyncError")));
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      return NcclStatus(state, guard.comm,
                        absl::StrCat(scope, ": NCCL initialisation of rank ",
                                     options.rank, " of ", options.world_size));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(scope, ": NCCL initialisation of rank ", options.rank,
                       " of ", options.world_size, " did not finish within ",
                       absl::FormatDuration(options.timeout),
                       " (are all ranks up and reachable?)"));
    }
    backoff.Pause();
  }

  ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(absl::StrCat(
                                          scope, ": communication stream")));
  ASSIGN_OR_RETURN(
      DeviceBuffer barrier,
      DeviceBuffer::Allocate(sizeof(float), absl::StrCat(scope, ": barrier")));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(barrier.get(), 0, sizeof(float)),
                             absl::StrCat(scope, ": barrier")));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicatorImpl(options, std::move(name), guard.Release(),
                               std::move(stream), std::move(barrier)));
}

}  // namespace pshard::worker
