// ControlPlane: the worker's side of the WorkerControl protocol
// (proto/pshard/v1/worker_control.proto), as absl::Status-returning calls
// with a deadline each. GrpcControlPlane talks to the coordinator; tests can
// substitute their own.
#ifndef PSHARD_WORKER_RUNTIME_CONTROL_PLANE_H_
#define PSHARD_WORKER_RUNTIME_CONTROL_PLANE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "pshard/v1/shard.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "pshard/v1/worker_control.pb.h"
#include "security/transport.h"

namespace pshard::worker {

// The two calls of the layout/assignment protocol, apart so that a client of
// only that protocol (AssignmentClient; the benchmark's simulated worker over
// its own stub) needs no more. Each call fails with DeadlineExceeded if the
// coordinator does not answer within `deadline`, and otherwise with the
// coordinator's status.
class AssignmentRpcs {
 public:
  virtual ~AssignmentRpcs() = default;

  virtual absl::StatusOr<v1::ReportBucketsResponse> ReportBuckets(
      const v1::ReportBucketsRequest& request, absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::ShardAssignment> GetAssignment(
      const v1::GetAssignmentRequest& request, absl::Duration deadline) = 0;
};

// An accepted WorkerControl.Attach stream (fast loss detection: the
// coordinator makes the worker LOST the moment the stream's connection
// closes). It stays open until the coordinator ends it (it shuts down or
// restarts) or Cancel. Thread-safe.
class Attachment {
 public:
  // Cancels the stream if it is still open.
  virtual ~Attachment() = default;

  // Waits up to `timeout` (real time) for the stream to end: why it ended
  // (Unavailable when the coordinator went away, Cancelled after Cancel), or
  // nullopt while it is open.
  virtual std::optional<absl::Status> WaitForEnd(absl::Duration timeout) = 0;

  // Ends the stream from this side, without blocking; WaitForEnd returns
  // soon after.
  virtual void Cancel() = 0;
};

class ControlPlane : public AssignmentRpcs {
 public:
  ~ControlPlane() override = default;

  // Each call fails with DeadlineExceeded if the coordinator does not answer
  // within `deadline`, and otherwise with the coordinator's status.
  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request, absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration deadline) = 0;
  virtual absl::Status KvPut(const v1::KvPutRequest& request,
                             absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::KvGetResponse> KvGet(
      const v1::KvGetRequest& request, absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::KvGetManyResponse> KvGetMany(
      const v1::KvGetManyRequest& request, absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::ReportProgressRequest& request, absl::Duration deadline) = 0;
  virtual absl::Status ReportResult(const v1::ReportResultRequest& request,
                                    absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::ReportCheckpointResponse> ReportCheckpoint(
      const v1::ReportCheckpointRequest& request, absl::Duration deadline) = 0;
  // Opens an Attach stream; returns once the coordinator accepted it. Only
  // the acceptance has `deadline`: the stream itself stays open.
  // NotFound: unknown worker or replaced incarnation (register again).
  virtual absl::StatusOr<std::unique_ptr<Attachment>> Attach(
      const v1::AttachRequest& request, absl::Duration deadline) = 0;
};

// A ControlPlane over a gRPC channel to the coordinator's WorkerControl,
// with `security`'s TLS settings (security/transport.h).
// InvalidArgument for bad TLS settings.
absl::StatusOr<std::unique_ptr<ControlPlane>> NewGrpcControlPlane(
    const std::string& coordinator_address,
    const security::TransportSecurity& security);
// The same over an existing channel (e.g. an in-process one in tests);
// `name` stands for the coordinator in error messages.
std::unique_ptr<ControlPlane> NewGrpcControlPlane(
    std::shared_ptr<grpc::Channel> channel, const std::string& name);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_CONTROL_PLANE_H_
