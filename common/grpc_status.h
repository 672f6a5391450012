// Conversion between absl::Status and grpc::Status. Every gRPC edge (server
// adapters, client stubs) converts exactly once, here.
#ifndef PSHARD_COMMON_GRPC_STATUS_H_
#define PSHARD_COMMON_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace pshard {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// Like FromGrpcStatus, with `context` (e.g. "Heartbeat to localhost:7070")
// prefixed to the message so callers can tell which call failed.
inline absl::Status FromGrpcStatus(const grpc::Status& status,
                                   absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      std::string(context) + ": " + status.error_message());
}

}  // namespace pshard

#endif  // PSHARD_COMMON_GRPC_STATUS_H_
