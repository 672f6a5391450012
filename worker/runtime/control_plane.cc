#include "worker/runtime/control_plane.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"

namespace pshard::worker {
namespace {

// An Attach stream over gRPC's callback API: the reactor reads the
// acceptance, then waits for the stream's end with one more read (the
// coordinator sends nothing else). It deletes itself in OnDone. What both
// need — the ClientContext above all — is the Attachment's State, which
// the reactor only points to: the Attachment cancels the stream and waits
// for the reactor's last act before the State goes, so that the call's
// last reference (the context's) is dropped on the owner's thread, never
// on a gRPC thread after the owner has moved on (and torn down the channel
// or, in tests, an in-process server).
class GrpcAttachment final : public Attachment {
 public:
  struct State {
    grpc::ClientContext context;
    absl::Mutex mu;
    bool accepted ABSL_GUARDED_BY(mu) = false;
    std::optional<absl::Status> ended ABSL_GUARDED_BY(mu);
    // The reactor's last act: after it, nothing of gRPC's touches State.
    absl::Notification reactor_done;
  };

  class Reactor final : public grpc::ClientReadReactor<v1::AttachResponse> {
   public:
    Reactor(v1::WorkerControl::Stub* stub, const v1::AttachRequest& request,
            State* state, std::string what)
        : request_(request), state_(state), what_(std::move(what)) {
      stub->async()->Attach(&state_->context, &request_, this);
      StartRead(&response_);
      StartCall();
    }

    void OnReadDone(bool ok) override {
      if (!ok) return;  // the stream ends; OnDone follows
      {
        absl::MutexLock lock(&state_->mu);
        state_->accepted = true;
      }
      StartRead(&response_);  // completes when the stream ends
    }

    void OnDone(const grpc::Status& status) override {
      State* const state = state_;
      {
        absl::MutexLock lock(&state->mu);
        state->ended = FromGrpcStatus(status, what_);
      }
      delete this;
      state->reactor_done.Notify();
    }

   private:
    const v1::AttachRequest request_;
    State* const state_;
    const std::string what_;
    v1::AttachResponse response_;
  };

  // Starts the stream.
  GrpcAttachment(v1::WorkerControl::Stub* stub,
                 const v1::AttachRequest& request, std::string what)
      : state_(std::make_unique<State>()) {
    new Reactor(stub, request, state_.get(), std::move(what));
  }

  ~GrpcAttachment() override {
    Cancel();
    // Once cancelled, the stream ends at once (its operations complete
    // locally); the bound only keeps a broken gRPC from hanging the owner.
    if (!state_->reactor_done.WaitForNotificationWithTimeout(
            kReactorDoneTimeout)) {
      LOG(ERROR) << "an Attach stream did not end within "
                 << kReactorDoneTimeout
                 << " of its cancellation; its state is left behind";
      (void)state_.release();
    }
  }

  // Waits up to `timeout` for the acceptance: OK, or why the stream ended
  // first, or DeadlineExceeded (the stream is then cancelled).
  absl::Status AwaitAccepted(absl::Duration timeout, const std::string& what) {
    absl::MutexLock lock(&state_->mu);
    auto decided = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->accepted || state_->ended.has_value();
    };
    if (!state_->mu.AwaitWithTimeout(absl::Condition(&decided), timeout)) {
      state_->context.TryCancel();
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": not accepted within ", absl::FormatDuration(timeout)));
    }
    return state_->accepted ? absl::OkStatus() : *state_->ended;
  }

  std::optional<absl::Status> WaitForEnd(absl::Duration timeout) override {
    absl::MutexLock lock(&state_->mu);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->ended.has_value();
    };
    state_->mu.AwaitWithTimeout(absl::Condition(&ended), timeout);
    return state_->ended;
  }

  void Cancel() override { state_->context.TryCancel(); }

 private:
  static constexpr absl::Duration kReactorDoneTimeout = absl::Seconds(30);

  std::unique_ptr<State> state_;
};

class GrpcControlPlane : public ControlPlane {
  using Stub = v1::WorkerControl::Stub;

 public:
  GrpcControlPlane(std::shared_ptr<grpc::Channel> channel,
                   const std::string& address)
      : address_(address), stub_(v1::WorkerControl::NewStub(channel)) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration deadline) override {
    return Call("RegisterWorker", &Stub::RegisterWorker, request, deadline);
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration deadline) override {
    return Call("Heartbeat", &Stub::Heartbeat, request, deadline);
  }

  absl::Status KvPut(const v1::KvPutRequest& request,
                     absl::Duration deadline) override {
    return Call("KvPut", &Stub::KvPut, request, deadline)
        .status();
  }

  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest& request,
                                          absl::Duration deadline) override {
    return Call("KvGet", &Stub::KvGet, request, deadline);
  }

  absl::StatusOr<v1::KvGetManyResponse> KvGetMany(
      const v1::KvGetManyRequest& request, absl::Duration deadline) override {
    return Call("KvGetMany", &Stub::KvGetMany, request, deadline);
  }

  absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request,
      absl::Duration deadline) override {
    return Call("ReportBuckets", &Stub::ReportBuckets, request, deadline);
  }

  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      absl::Duration deadline) override {
    return Call("GetAssignment", &Stub::GetAssignment, request, deadline);
  }

  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request,
      absl::Duration deadline) override {
    return Call("ReportProgress", &Stub::ReportProgress, request, deadline);
  }

  absl::Status ReportResult(const v1::ReportResultRequest& request,
                            absl::Duration deadline) override {
    return Call("ReportResult", &Stub::ReportResult, request, deadline)
        .status();
  }

  absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& request,
      absl::Duration deadline) override {
    return Call("ReportCheckpoint", &Stub::ReportCheckpoint, request, deadline);
  }

  absl::StatusOr<std::unique_ptr<Attachment>> Attach(
      const v1::AttachRequest& request, absl::Duration deadline) override {
    const std::string what = absl::StrCat("Attach to ", address_);
    auto attachment = std::make_unique<GrpcAttachment>(stub_.get(), request,
                                                       what);
    absl::Status accepted = attachment->AwaitAccepted(deadline, what);
    if (!accepted.ok()) return accepted;
    return attachment;
  }

 private:
  // Calls one unary method of the stub with a deadline; gRPC errors come
  // back as statuses that name the method and the coordinator.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(
      const char* method,
      grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                Response*),
      const Request& request, absl::Duration deadline) {
    grpc::ClientContext context;
    // gRPC's deadline is a point in real time (the transport measures it),
    // whatever clock the caller's logic runs on.
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(deadline));
    Response response;
    grpc::Status status = (stub_.get()->*rpc)(&context, request, &response);
    if (!status.ok()) {
      return FromGrpcStatus(status, absl::StrCat(method, " to ", address_));
    }
    return response;
  }

  const std::string address_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> NewGrpcControlPlane(
    const std::string& coordinator_address,
    const security::TransportSecurity& security) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::NewChannel(coordinator_address, security));
  return NewGrpcControlPlane(std::move(channel), coordinator_address);
}

std::unique_ptr<ControlPlane> NewGrpcControlPlane(
    std::shared_ptr<grpc::Channel> channel, const std::string& name) {
  return std::make_unique<GrpcControlPlane>(std::move(channel), name);
}

}  // namespace pshard::worker
