// WorkerStatusService: the gRPC face of a worker's own state (what it owns,
// its optimizer-state bytes, its step), for operators and probes. A thin
// adapter over a status source (Agent::Status()); the source may answer
// Unavailable while the worker is starting.
#ifndef PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_
#define PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_

#include <functional>
#include <utility>

#include "absl/status/statusor.h"
#include "common/grpc_status.h"
#include "pshard/v1/worker_status.grpc.pb.h"

namespace pshard::worker {

class WorkerStatusService final : public v1::WorkerStatus::Service {
 public:
  using Source = std::function<absl::StatusOr<v1::GetWorkerStatusResponse>()>;

  explicit WorkerStatusService(Source source) : source_(std::move(source)) {}

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetWorkerStatusRequest* request,
                         v1::GetWorkerStatusResponse* response) override {
    absl::StatusOr<v1::GetWorkerStatusResponse> status = source_();
    if (!status.ok()) return ToGrpcStatus(status.status());
    *response = *std::move(status);
    return grpc::Status::OK;
  }

 private:
  const Source source_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_WORKER_STATUS_SERVICE_H_
