#include "worker/runtime/control_plane.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace pshard::worker {
namespace {

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

std::unique_ptr<ControlPlane> NewGrpcControlPlane(
    const std::string& coordinator_address) {
  return NewGrpcControlPlane(
      grpc::CreateChannel(coordinator_address,
                          grpc::InsecureChannelCredentials()),
      coordinator_address);
}

std::unique_ptr<ControlPlane> NewGrpcControlPlane(
    std::shared_ptr<grpc::Channel> channel, const std::string& name) {
  return std::make_unique<GrpcControlPlane>(std::move(channel), name);
}

}  // namespace pshard::worker
