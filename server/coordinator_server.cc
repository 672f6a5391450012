#include "server/coordinator_server.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rpc_metrics.h"
#include "common/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace pshard {
namespace server {

CoordinatorServer::CoordinatorServer(coordinator::Coordinator* coordinator,
                                     const Clock* clock,
                                     ServerOptions options)
    : coordinator_(coordinator),
      options_(std::move(options)),
      jobs_(coordinator, clock, options_.services),
      shards_(coordinator, options_.services),
      cluster_(coordinator, options_.services),
      worker_control_(coordinator, clock, options_.services),
      reflection_v1_({v1::JobService::service_full_name(),
                      v1::ShardService::service_full_name(),
                      v1::ClusterService::service_full_name(),
                      v1::WorkerControl::service_full_name()}) {}

namespace {

// The services with calls that commit to the state store: their health is
// the store's.
const std::vector<std::string>& StoreBackedServices() {
  static const auto* const services = new std::vector<std::string>{
      v1::JobService::service_full_name(),
      v1::ClusterService::service_full_name(),
      v1::WorkerControl::service_full_name()};
  return *services;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    coordinator::Coordinator* coordinator, const Clock* clock,
    ServerOptions options) {
  std::unique_ptr<CoordinatorServer> s(
      new CoordinatorServer(coordinator, clock, std::move(options)));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   security::ServerCredentials(s->options_.security));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(s->options_.listen, credentials, &s->port_);
  builder.SetMaxReceiveMessageSize(s->options_.max_receive_message_bytes);
  grpc::ResourceQuota quota("pshard-coordinator");
  // Each WatchJob stream holds a sync thread while it lasts: the streams
  // get their own share on top, so that a full set of them (max_watchers)
  // never starves the status RPCs of threads.
  quota.SetMaxThreads(s->options_.max_sync_threads +
                      s->options_.services.max_watchers);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&s->jobs_);
  builder.RegisterService(&s->shards_);
  builder.RegisterService(&s->cluster_);
  builder.RegisterService(&s->worker_control_);
  builder.RegisterService(&s->reflection_v1_);
  // Health from the shared table instead of gRPC's built-in service, so
  // that the health-only server below says the same.
  UseHealthStatus(builder, s->health_status_);
  builder.RegisterService(&s->health_service_);
  if (s->options_.metrics != nullptr) {
    builder.experimental().SetInterceptorCreators(
        RpcMetricsInterceptors(*s->options_.metrics));
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on ", s->options_.listen,
                     " (address in use or invalid?)"));
  }
  if (!s->options_.health_listen.empty()) {
    ASSIGN_OR_RETURN(s->health_server_,
                     HealthOnlyServer::Start(s->options_.health_listen,
                                             s->health_status_));
  }
  CoordinatorServer* self = s.get();
  grpc::HealthCheckServiceInterface* health =
      s->server_->GetHealthCheckService();
  if (health != nullptr) {
    // Every service by name, so that a probe of one ("pshard.v1.JobService")
    // answers rather than NOT_FOUND.
    for (const std::string& service : StoreBackedServices()) {
      health->SetServingStatus(service, true);
    }
    health->SetServingStatus(v1::ShardService::service_full_name(), true);
  }
  s->ticker_ = std::thread([self, health] {
    // NOT_SERVING while the state store cannot commit (Tick probes it), so
    // that a load balancer or an operator's check sees the outage; SERVING
    // again by itself once a write succeeds. The server as a whole ("") and
    // the services whose calls write state follow the store; ShardService
    // only reads and stays SERVING.
    bool serving = true;
    while (!self->stop_.WaitForNotificationWithTimeout(
        self->options_.tick_interval)) {
      self->coordinator_->Tick();
      const absl::Status store = self->coordinator_->StoreHealth();
      if (store.ok() != serving && health != nullptr) {
        serving = store.ok();
        // The services before the server, so that whoever sees the
        // server's change sees theirs too.
        for (const std::string& service : StoreBackedServices()) {
          health->SetServingStatus(service, serving);
        }
        health->SetServingStatus("", serving);
        if (serving) {
          LOG(INFO) << "health SERVING: the state store commits again";
        } else {
          LOG(ERROR) << "health NOT_SERVING: the state store cannot commit: "
                     << store.message();
        }
      }
    }
  });
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

namespace {

grpc::ChannelArguments InProcessChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return args;
}

}  // namespace

std::shared_ptr<grpc::Channel> CoordinatorServer::InProcessChannel() {
  return server_->InProcessChannel(InProcessChannelArgs());
}

std::shared_ptr<grpc::Channel> CoordinatorServer::InProcessChannel(
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors) {
  return server_->experimental().InProcessChannelWithInterceptors(
      InProcessChannelArgs(), std::move(interceptors));
}

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // Every status NOT_SERVING for good: a coordinator on its way out must not
  // look ready to a probe of either server.
  health_status_->Shutdown();
  // gRPC deadlines are wall-clock time whatever clock the coordinator runs
  // on (a test's fake clock never moves gRPC).
  // First, so that Shutdown does not wait out the grace for streams that
  // never end by themselves, and so that no worker is detached (made LOST)
  // by its stream's cancellation.
  worker_control_.attach_streams().Close();
  if (server_) {
    server_->Shutdown(absl::ToChronoTime(Clock::Real().Now() + grace));
  }
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  if (server_) server_->Wait();
  // Last, so that probes see NOT_SERVING (set above) until the end.
  if (health_server_) health_server_->Shutdown(absl::ZeroDuration());
}

}  // namespace server
}  // namespace pshard
