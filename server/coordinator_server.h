// The coordinator's gRPC server: the four pshard services plus health and
// reflection, message-size caps, a bounded sync thread pool, and the ticker
// thread that drives Coordinator::Tick (worker loss, wait deadlines) and
// sets the health status: NOT_SERVING while the state store cannot commit
// (Coordinator::StoreHealth), SERVING again once it can. With
// ServerOptions::health_listen, a second, plaintext server answers only
// grpc.health.v1.Health from the same statuses (for the kubelet's probes,
// which cannot speak TLS; common/health.h).
// Used by the pshard-coordinator binary, the in-process tests and the
// benchmark.
#ifndef PSHARD_SERVER_COORDINATOR_SERVER_H_
#define PSHARD_SERVER_COORDINATOR_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/health.h"
#include "coordinator/coordinator.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/server.h"
#include "prometheus/registry.h"
#include "security/transport.h"
#include "server/reflection_v1.h"
#include "server/services.h"

namespace pshard {
namespace server {

struct ServerOptions {
  // host:port; port 0 picks a free port (see CoordinatorServer::port()).
  std::string listen = "0.0.0.0:7070";
  // TLS (the default, which needs a certificate) or plaintext when
  // security.insecure (security/transport.h).
  security::TransportSecurity security;
  // host:port of the plaintext health-only server (grpc.health.v1.Health
  // and nothing else, answering what the main server's health says); empty:
  // none. Port 0 picks a free port (see health_port()).
  std::string health_listen;
  // Largest request accepted (bigger ones fail with RESOURCE_EXHAUSTED
  // before any handler runs).
  int max_receive_message_bytes = 16 << 20;
  // Threads of the synchronous services' short RPCs; WatchJob streams get
  // services.max_watchers more.
  int max_sync_threads = 64;
  // How often Coordinator::Tick runs.
  absl::Duration tick_interval = absl::Milliseconds(50);
  // When set, every RPC is counted and timed into it (common/rpc_metrics.h);
  // it must outlive the server.
  prometheus::Registry* metrics = nullptr;
  ServiceOptions services;
};

class CoordinatorServer {
 public:
  // Starts serving `coordinator` (which must outlive the server).
  // Errors: Unavailable if the address cannot be bound; InvalidArgument
  // naming the flag for bad TLS settings (ValidateServerSecurity) or a
  // malformed health_listen ("--health_listen: ..."); Unavailable naming
  // --health_listen when that address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      coordinator::Coordinator* coordinator, const Clock* clock,
      ServerOptions options);

  // Shuts down (as Shutdown()) if still running.
  ~CoordinatorServer();

  // The bound port.
  int port() const { return port_; }
  // The health-only server's bound port; 0 without health_listen.
  int health_port() const {
    return health_server_ != nullptr ? health_server_->port() : 0;
  }

  // A channel to this server that bypasses the network.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // The same, with client interceptors (tests record or fail chosen calls).
  std::shared_ptr<grpc::Channel> InProcessChannel(
      std::vector<std::unique_ptr<
          grpc::experimental::ClientInterceptorFactoryInterface>>
          interceptors);

  // The JobService (tests wait on its open WatchJob streams).
  JobServiceImpl& job_service() { return jobs_; }

  // The WorkerControl service's open Attach streams (tests wait on them).
  AttachStreams& attach_streams() { return worker_control_.attach_streams(); }

  // Ends the open Attach streams (their workers are not detached: they
  // attach again to the next coordinator), stops accepting calls, cancels
  // pending ones after `grace`, stops the ticker. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

 private:
  CoordinatorServer(coordinator::Coordinator* coordinator,
                    const Clock* clock, ServerOptions options);

  coordinator::Coordinator* const coordinator_;
  const ServerOptions options_;
  JobServiceImpl jobs_;
  ShardServiceImpl shards_;
  ClusterServiceImpl cluster_;
  WorkerControlImpl worker_control_;
  ReflectionV1Service reflection_v1_;
  // The one table of serving statuses: the main server's
  // HealthCheckServiceInterface (what GetHealthCheckService() returns) and
  // what both servers' Health services answer from.
  const std::shared_ptr<HealthStatus> health_status_ =
      std::make_shared<HealthStatus>();
  HealthService health_service_{health_status_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthOnlyServer> health_server_;
  int port_ = 0;
  absl::Notification stop_;
  std::thread ticker_;
  bool shut_down_ = false;
};

}  // namespace server
}  // namespace pshard

#endif  // PSHARD_SERVER_COORDINATOR_SERVER_H_
