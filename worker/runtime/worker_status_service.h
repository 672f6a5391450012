// WorkerStatusService: the gRPC face of a worker's own state (what it owns,
// its optimizer-state bytes, its step), for operators and probes, and of its
// program jobs' logs (StreamLogs, for `pshardctl logs`). A thin adapter over
// a status source (Agent::Status()), which may answer Unavailable while the
// worker is starting, and a ProgramLogStreamer (program_log_stream.h).
#ifndef PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_
#define PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_

#include <functional>
#include <utility>

#include "absl/status/statusor.h"
#include "common/grpc_status.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "security/access_policy.h"
#include "security/call_auth.h"
#include "worker/runtime/program_log_stream.h"

namespace pshard::worker {

class WorkerStatusService final : public v1::WorkerStatus::Service {
 public:
  using Source = std::function<absl::StatusOr<v1::GetWorkerStatusResponse>()>;

  // `logs` and `access` (nullptr: no access control) must outlive the
  // service.
  WorkerStatusService(Source source, const ProgramLogStreamer* logs,
                      const security::AccessPolicy* access = nullptr)
      : source_(std::move(source)), logs_(logs), access_(access) {}

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetWorkerStatusRequest* request,
                         v1::GetWorkerStatusResponse* response) override {
    absl::StatusOr<security::Caller> caller = security::AuthorizeCall(
        *context, access_, "/pshard.v1.WorkerStatus/GetStatus");
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    absl::StatusOr<v1::GetWorkerStatusResponse> status = source_();
    if (!status.ok()) return ToGrpcStatus(status.status());
    *response = *std::move(status);
    return grpc::Status::OK;
  }

  grpc::Status StreamLogs(grpc::ServerContext* context,
                          const v1::StreamLogsRequest* request,
                          grpc::ServerWriter<v1::LogChunk>* writer) override {
    absl::StatusOr<security::Caller> caller = security::AuthorizeCall(
        *context, access_, "/pshard.v1.WorkerStatus/StreamLogs");
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    return ToGrpcStatus(logs_->Stream(
        *request, [context] { return context->IsCancelled(); },
        [writer](const v1::LogChunk& chunk) { return writer->Write(chunk); }));
  }

 private:
  const Source source_;
  const ProgramLogStreamer* const logs_;
  const security::AccessPolicy* const access_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_
