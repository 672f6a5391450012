// grpc.health.v1 for a process with more than one gRPC server: one table of
// serving statuses (HealthStatus) that every server of the process answers
// from, and a plaintext server that answers only grpc.health.v1.Health
// (HealthOnlyServer, the binaries' --health_listen).
//
// Why: the kubelet's gRPC probes cannot speak TLS, and the main servers
// speak nothing else. A second, health-only server in plaintext lets the
// probes in without opening any pshard RPC to plaintext. It must say what the
// main server's health says (the coordinator goes NOT_SERVING while its state
// store cannot commit), so both read the same table instead of keeping two:
//
//   main server (TLS)                 health-only server (plaintext)
//     GetHealthCheckService() ----.      HealthService (Check, Watch)
//     (writes: SetServingStatus)   \          |
//     HealthService (Check, Watch)  +--> HealthStatus <---+
//
// The main server is given the table as its HealthCheckServiceInterface
// (UseHealthStatus), so code that sets statuses through
// grpc::Server::GetHealthCheckService() keeps working unchanged, and gRPC's
// built-in health service is not created.
#ifndef PSHARD_COMMON_HEALTH_H_
#define PSHARD_COMMON_HEALTH_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace pshard {

// The serving status of each service name of a process ("" is the server as
// a whole). Thread-safe. Starts with "" SERVING, as gRPC's built-in service.
class HealthStatus {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthStatus();

  // Sets (or adds) `service`'s status. Ignored after Shutdown().
  void Set(const std::string& service, bool serving);
  // Sets every known service's status. Ignored after Shutdown().
  void SetAll(bool serving);
  // Every service NOT_SERVING, and no change afterwards (a server going
  // away: probes must not see it come back).
  void Shutdown();

  // `service`'s status; nullopt when no status was ever set for it.
  std::optional<ServingStatus> Get(const std::string& service) const;

  // Waits until `service`'s status (SERVICE_UNKNOWN for a name never set)
  // differs from `last`, or until `timeout` passes; returns the status then.
  ServingStatus WaitForChange(const std::string& service, ServingStatus last,
                              absl::Duration timeout) const;

 private:
  ServingStatus GetLocked(const std::string& service) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// grpc.health.v1.Health (Check and Watch) answered from a HealthStatus,
// with gRPC's own semantics: Check of an unknown service is NOT_FOUND;
// Watch of one sends SERVICE_UNKNOWN and waits for it to appear. A Watch
// holds a thread of a synchronous server while it lasts, so at most
// `max_watchers` are open at once (more get RESOURCE_EXHAUSTED).
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthService(std::shared_ptr<const HealthStatus> status,
                         int max_watchers = 16);

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(
      grpc::ServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer)
      override;

 private:
  const std::shared_ptr<const HealthStatus> status_;
  const int max_watchers_;
  absl::Mutex mu_;
  int watchers_ ABSL_GUARDED_BY(mu_) = 0;
};

// Makes `status` the HealthCheckServiceInterface of the server `builder`
// builds (what its GetHealthCheckService() returns, and what stops gRPC's
// built-in health service from being created). The server does not answer
// Health by itself: register a HealthService on it too.
void UseHealthStatus(grpc::ServerBuilder& builder,
                     std::shared_ptr<HealthStatus> status);

// InvalidArgument naming `flag` unless `address` is HOST:PORT with a
// non-empty host (a name, an IPv4 address or a bracketed IPv6 one) and a
// port in 0..65535.
absl::Status ValidateListenAddress(absl::string_view flag,
                                   absl::string_view address);

// A plaintext gRPC server with grpc.health.v1.Health and nothing else (no
// reflection, no pshard service): the --health_listen port.
class HealthOnlyServer {
 public:
  // Serves `status` on `listen` (port 0 picks a free port).
  // Errors: InvalidArgument for a malformed address (ValidateListenAddress,
  // naming "--health_listen"); Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HealthOnlyServer>> Start(
      const std::string& listen, std::shared_ptr<const HealthStatus> status);

  ~HealthOnlyServer();

  int port() const { return port_; }

  // Stops accepting calls and cancels open ones (Watch streams) after
  // `grace`. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

 private:
  explicit HealthOnlyServer(std::shared_ptr<const HealthStatus> status);

  HealthService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace pshard

#endif  // PSHARD_COMMON_HEALTH_H_
