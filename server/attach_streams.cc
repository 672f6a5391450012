#include "server/attach_streams.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "common/logging.h"

namespace pshard {
namespace server {
namespace {

// A stream refused at its start: finished with `status`, deleted when done.
class Refused final : public grpc::ServerWriteReactor<v1::AttachResponse> {
 public:
  explicit Refused(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

grpc::Status ShuttingDown() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "coordinator shutting down; attach again");
}

}  // namespace

// One accepted stream. Exactly one of {the worker going away, Close} claims
// the right to finish it, under the owner's lock; a stream cannot reach
// OnDone before it is finished, so whoever claims it may call Finish after
// unlocking.
class AttachStreams::Stream final
    : public grpc::ServerWriteReactor<v1::AttachResponse> {
 public:
  Stream(AttachStreams* owner, const v1::AttachRequest& request,
         int64_t attachment_id)
      : owner_(owner), request_(request), attachment_id_(attachment_id) {}

  // Opens the stream (or, after Close, finishes it as refused).
  void Open() ABSL_LOCKS_EXCLUDED(owner_->mu_) {
    {
      absl::MutexLock lock(&owner_->mu_);
      if (!owner_->closed_) {
        owner_->open_.insert(this);
        // Under the lock, so that Close cannot finish the stream before
        // this write: the reactor is not bound to its call yet (its handler
        // has not returned), so gRPC only records the write here.
        StartWrite(&accepted_);
        return;
      }
      finished_ = true;
    }
    Finish(ShuttingDown());
  }

  // Close's side: true when it may finish the stream.
  bool ClaimFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(owner_->mu_) {
    return !std::exchange(finished_, true);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) EndByWorker();  // the worker is gone before it was told
  }

  void OnCancel() override { EndByWorker(); }

  void OnDone() override {
    bool worker_gone;
    {
      absl::MutexLock lock(&owner_->mu_);
      worker_gone = worker_gone_;
    }
    if (worker_gone) {
      const absl::Status detached = owner_->c_->WorkerDetached(
          request_.worker_id(), request_.incarnation(), attachment_id_);
      if (!detached.ok()) {
        LOG(ERROR) << "detaching worker " << request_.worker_id()
                   << " failed: " << detached;
      }
    }
    {
      absl::MutexLock lock(&owner_->mu_);
      owner_->open_.erase(this);
    }
    delete this;
  }

 private:
  void EndByWorker() ABSL_LOCKS_EXCLUDED(owner_->mu_) {
    {
      absl::MutexLock lock(&owner_->mu_);
      if (!ClaimFinish()) return;  // Close finished it first
      worker_gone_ = true;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the worker went away"));
  }

  AttachStreams* const owner_;
  const v1::AttachRequest request_;
  const int64_t attachment_id_;
  const v1::AttachResponse accepted_;
  bool finished_ ABSL_GUARDED_BY(owner_->mu_) = false;
  bool worker_gone_ ABSL_GUARDED_BY(owner_->mu_) = false;
};

grpc::ServerWriteReactor<v1::AttachResponse>* AttachStreams::Start(
    const v1::AttachRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return new Refused(ShuttingDown());
  }
  absl::StatusOr<int64_t> attachment = c_->AttachWorker(request);
  if (!attachment.ok()) return new Refused(ToGrpcStatus(attachment.status()));
  auto* stream = new Stream(this, request, *attachment);
  stream->Open();
  return stream;
}

grpc::ServerWriteReactor<v1::AttachResponse>* AttachStreams::Refuse(
    const absl::Status& status) {
  return new Refused(ToGrpcStatus(status));
}

void AttachStreams::Close() {
  std::vector<Stream*> to_finish;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (Stream* stream : open_) {
      if (stream->ClaimFinish()) to_finish.push_back(stream);
    }
  }
  for (Stream* stream : to_finish) stream->Finish(ShuttingDown());
}

bool AttachStreams::AwaitOpen(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto is_n = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(open_.size()) == n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&is_n), timeout);
}

}  // namespace server
}  // namespace pshard
