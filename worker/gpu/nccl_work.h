// The Work handles of NcclCommunicator (nccl_communicator.h) and what they
// share with it: the communicator's sticky failure, and the thread that runs
// OnCompletion callbacks. Internal to the CUDA build of :nccl_communicator;
// included by nccl_communicator.cc and nccl_work.cc only.
//
// An NcclWorkImpl is done when the CUDA event recorded after its operation
// fires, or as soon as the communicator has failed (an aborted NCCL kernel
// also "finishes", so its outputs cannot be trusted): then its status is
// the failure. Work handles may outlive their communicator; they hold the
// failure state and the watcher by shared_ptr.
#ifndef PSHARD_WORKER_GPU_NCCL_WORK_H_
#define PSHARD_WORKER_GPU_NCCL_WORK_H_

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/gpu/cuda_util.h"
#include "worker/gpu/nccl_communicator.h"

namespace pshard::worker::gpu {

// The communicator's failure state, shared with Work handles. The first
// failure wins and is sticky. Thread-safe.
class NcclFailureState {
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

class NcclCompletionWatcher;

class NcclWorkImpl final : public NcclWork,
                           public std::enable_shared_from_this<NcclWorkImpl> {
 public:
  // An issued operation on `device`: done when `event` fires or the
  // communicator fails. Wait() measures its timeout on `clock`, which must
  // outlive the handle.
  NcclWorkImpl(std::shared_ptr<NcclFailureState> shared,
               std::shared_ptr<NcclCompletionWatcher> watcher, int device,
               CudaEvent event, const Clock* clock);

  // An operation that finished (or failed) before reaching the device.
  static std::shared_ptr<NcclWorkImpl> Done(absl::Status status);

  bool IsCompleted() override { return Poll(); }
  absl::Status Wait(absl::Duration timeout) override;
  void OnCompletion(std::function<void(absl::Status)> done) override;
  absl::Status StreamWait(CUstream_st* stream) override;

  // Checks once whether the operation has finished; when it returns true the
  // status is final.
  bool Poll();

  absl::Status status();

 private:
  const std::shared_ptr<NcclFailureState> shared_;
  const std::shared_ptr<NcclCompletionWatcher> watcher_;
  const int device_;
  const CudaEvent event_;
  const Clock* const clock_;  // null for Done() handles, which never wait
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Runs OnCompletion callbacks: a thread that polls the events of works with
// pending callbacks, pausing `poll_interval` on `clock` between rounds that
// finished nothing. Polling (rather than cudaLaunchHostFunc) because a host
// function enqueued at OnCompletion time would sit behind everything issued
// since the operation, and must not call CUDA, which callbacks may.
class NcclCompletionWatcher {
 public:
  NcclCompletionWatcher(int device, const Clock* clock,
                        absl::Duration poll_interval = absl::Microseconds(50))
      : device_(device), clock_(clock), poll_interval_(poll_interval) {}

  void Start();

  // Queues `done` for `work`; false once shut down.
  bool Add(std::shared_ptr<NcclWorkImpl> work,
           std::function<void(absl::Status)> done);

  // Stops the thread, then runs every remaining callback: with its status if
  // its operation finished, else Aborted.
  void Shutdown();

 private:
  struct Entry {
    std::shared_ptr<NcclWorkImpl> work;
    std::function<void(absl::Status)> done;
  };

  void Run();

  const int device_;
  const Clock* const clock_;
  const absl::Duration poll_interval_;
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Entry> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_NCCL_WORK_H_
