#include "worker/runtime/control_plane.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace pshard::worker {
namespace {

class GrpcControlPlane : public ControlPlane {
 public:
  explicit GrpcControlPlane(const std::string& address)
      : address_(address),
        stub_(v1::WorkerControl::NewStub(grpc::CreateChannel(
            address, grpc::InsecureChannelCredentials()))) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request,
      absl::Duration deadline) override {
    return Call<v1::RegisterWorkerResponse>(
        "RegisterWorker", request, deadline,
        [this](grpc::ClientContext* c, const auto& req, auto* resp) {
          return stub_->RegisterWorker(c, req, resp);
        });
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration deadline) override {
    return Call<v1::HeartbeatResponse>(
        "Heartbeat", request, deadline,
        [this](grpc::ClientContext* c, const auto& req, auto* resp) {
          return stub_->Heartbeat(c, req, resp);
        });
  }

  absl::Status KvPut(const v1::KvPutRequest& request,
                     absl::Duration deadline) override {
    return Call<v1::KvPutResponse>(
               "KvPut", request, deadline,
               [this](grpc::ClientContext* c, const auto& req, auto* resp) {
                 return stub_->KvPut(c, req, resp);
               })
        .status();
  }

  absl::StatusOr<v1::KvGetResponse> KvGet(const v1::KvGetRequest& request,
                                          absl::Duration deadline) override {
    return Call<v1::KvGetResponse>(
        "KvGet", request, deadline,
        [this](grpc::ClientContext* c, const auto& req, auto* resp) {
          return stub_->KvGet(c, req, resp);
        });
  }

  absl::Status ReportBuckets(const v1::ReportBucketsRequest& request,
                             absl::Duration deadline) override {
    return Call<v1::ReportBucketsResponse>(
               "ReportBuckets", request, deadline,
               [this](grpc::ClientContext* c, const auto& req, auto* resp) {
                 return stub_->ReportBuckets(c, req, resp);
               })
        .status();
  }

  absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      absl::Duration deadline) override {
    return Call<v1::ShardAssignment>(
        "GetAssignment", request, deadline,
        [this](grpc::ClientContext* c, const auto& req, auto* resp) {
          return stub_->GetAssignment(c, req, resp);
        });
  }

  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request,
      absl::Duration deadline) override {
    return Call<v1::ReportProgressResponse>(
        "ReportProgress", request, deadline,
        [this](grpc::ClientContext* c, const auto& req, auto* resp) {
          return stub_->ReportProgress(c, req, resp);
        });
  }

  absl::Status ReportResult(const v1::ReportResultRequest& request,
                            absl::Duration deadline) override {
    return Call<v1::ReportResultResponse>(
               "ReportResult", request, deadline,
               [this](grpc::ClientContext* c, const auto& req, auto* resp) {
                 return stub_->ReportResult(c, req, resp);
               })
        .status();
  }

 private:
  template <typename Response, typename Request, typename Fn>
  absl::StatusOr<Response> Call(const char* method, const Request& request,
                                absl::Duration deadline, Fn fn) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(deadline));
    Response response;
    grpc::Status status = fn(&context, request, &response);
    if (!status.ok()) {
      return FromGrpcStatus(status, absl::StrCat(method, " to ", address_));
    }
    return response;
  }

  const std::string address_;
  std::unique_ptr<v1::WorkerControl::Stub> stub_;
};

}  // namespace

std::unique_ptr<ControlPlane> NewGrpcControlPlane(
    const std::string& coordinator_address) {
  return std::make_unique<GrpcControlPlane>(coordinator_address);
}

}  // namespace pshard::worker
