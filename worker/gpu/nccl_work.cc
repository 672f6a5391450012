#include "worker/gpu/nccl_work.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_util.h"

namespace pshard::worker::gpu {

namespace {

absl::Status DestroyedBeforeFinished() {
  return absl::AbortedError(
      "NCCL communicator destroyed before the operation finished");
}

}  // namespace

NcclWorkImpl::NcclWorkImpl(std::shared_ptr<NcclFailureState> shared,
                           std::shared_ptr<NcclCompletionWatcher> watcher,
                           int device, CudaEvent event, const Clock* clock)
    : shared_(std::move(shared)),
      watcher_(std::move(watcher)),
      device_(device),
      event_(std::move(event)),
      clock_(clock) {}

std::shared_ptr<NcclWorkImpl> NcclWorkImpl::Done(absl::Status status) {
  auto work = std::make_shared<NcclWorkImpl>(nullptr, nullptr, -1, CudaEvent(),
                                             nullptr);
  absl::MutexLock lock(&work->mu_);
  work->done_ = true;
  work->status_ = std::move(status);
  return work;
}

absl::Status NcclWorkImpl::Wait(absl::Duration timeout) {
  if (!Poll()) {
    const absl::Time deadline = clock_->Now() + timeout;
    Backoff backoff(*clock_);
    do {
      if (clock_->Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("NCCL operation did not finish within ",
                         absl::FormatDuration(timeout)));
      }
      backoff.Pause();
    } while (!Poll());
  }
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status NcclWorkImpl::StreamWait(CUstream_st* stream) {
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

// After a communicator failure every operation not yet seen to finish fails
// with it: an aborted NCCL kernel also "finishes".
bool NcclWorkImpl::Poll() {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return true;
  }
  absl::Status status;
  bool finished = false;
  {
    ScopedDevice scoped(device_);
    const cudaError_t err = scoped.status().ok() ? QueryEvent(event_.get())
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

absl::Status NcclWorkImpl::status() {
  absl::MutexLock lock(&mu_);
  return status_;
}

void NcclWorkImpl::OnCompletion(std::function<void(absl::Status)> done) {
  if (Poll()) {
    done(status());
    return;
  }
  if (watcher_ == nullptr || !watcher_->Add(shared_from_this(), done)) {
    // The communicator is gone; its teardown drained or aborted everything.
    done(Poll() ? status() : DestroyedBeforeFinished());
  }
}

void NcclCompletionWatcher::Start() {
  thread_ = std::thread([this] { Run(); });
}

bool NcclCompletionWatcher::Add(std::shared_ptr<NcclWorkImpl> work,
                                std::function<void(absl::Status)> done) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  pending_.push_back(Entry{std::move(work), std::move(done)});
  return true;
}

void NcclCompletionWatcher::Shutdown() {
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
    e.done(e.work->Poll() ? e.work->status() : DestroyedBeforeFinished());
  }
}

void NcclCompletionWatcher::Run() {
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
    if (finished.empty()) clock_->SleepFor(poll_interval_);
  }
}

}  // namespace pshard::worker::gpu
