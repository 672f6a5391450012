#include "common/health.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/health_check_service_server_builder_option.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/security/server_credentials.h"

namespace pshard {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthStatus::HealthStatus() { statuses_[""] = HealthCheckResponse::SERVING; }

void HealthStatus::Set(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  statuses_[service] =
      serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthStatus::SetAll(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  for (auto& [service, status] : statuses_) {
    status = serving ? HealthCheckResponse::SERVING
                     : HealthCheckResponse::NOT_SERVING;
  }
}

void HealthStatus::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (auto& [service, status] : statuses_) {
    status = HealthCheckResponse::NOT_SERVING;
  }
  shut_down_ = true;
}

HealthStatus::ServingStatus HealthStatus::GetLocked(
    const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN
                               : it->second;
}

std::optional<HealthStatus::ServingStatus> HealthStatus::Get(
    const std::string& service) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = statuses_.find(service);
  if (it == statuses_.end()) return std::nullopt;
  return it->second;
}

HealthStatus::ServingStatus HealthStatus::WaitForChange(
    const std::string& service, ServingStatus last,
    absl::Duration timeout) const {
  absl::ReaderMutexLock lock(&mu_);
  auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return GetLocked(service) != last;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return GetLocked(service);
}

namespace {

// What ServerBuilder owns as the server's HealthCheckServiceInterface: it
// deletes it with the server, so it only points at the shared table.
class HealthStatusInterface final : public grpc::HealthCheckServiceInterface {
 public:
  explicit HealthStatusInterface(std::shared_ptr<HealthStatus> status)
      : status_(std::move(status)) {}

  void SetServingStatus(const std::string& service_name,
                        bool serving) override {
    status_->Set(service_name, serving);
  }
  void SetServingStatus(bool serving) override { status_->SetAll(serving); }
  void Shutdown() override { status_->Shutdown(); }

 private:
  const std::shared_ptr<HealthStatus> status_;
};

// Drops every server plugin (gRPC's reflection plugin, once initialised,
// adds itself to every server built afterwards): the health-only server
// must expose grpc.health.v1.Health alone.
class NoPluginsOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins)
      override {
    plugins->clear();
  }
};

// How long a Watch waits between checks that its client is still there.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(500);

}  // namespace

HealthService::HealthService(std::shared_ptr<const HealthStatus> status,
                             int max_watchers)
    : status_(std::move(status)), max_watchers_(max_watchers) {}

grpc::Status HealthService::Check(grpc::ServerContext*,
                                  const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  const std::optional<HealthStatus::ServingStatus> status =
      status_->Get(request->service());
  if (!status.has_value()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("unknown service \"", request->service(),
                                     "\""));
  }
  response->set_status(*status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(
    grpc::ServerContext* context, const HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  {
    absl::MutexLock lock(&mu_);
    if (watchers_ >= max_watchers_) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("too many open Watch streams (", max_watchers_,
                       "); use Check"));
    }
    ++watchers_;
  }
  // The first answer at once, then one per change, until the client goes
  // or the server shuts down (which cancels the call).
  HealthStatus::ServingStatus sent = HealthCheckResponse::UNKNOWN;
  bool first = true;
  while (!context->IsCancelled()) {
    const HealthStatus::ServingStatus now =
        first ? status_->Get(request->service())
                    .value_or(HealthCheckResponse::SERVICE_UNKNOWN)
              : status_->WaitForChange(request->service(), sent, kWatchPoll);
    if (first || now != sent) {
      HealthCheckResponse response;
      response.set_status(now);
      if (!writer->Write(response)) break;
      sent = now;
      first = false;
    }
  }
  absl::MutexLock lock(&mu_);
  --watchers_;
  return grpc::Status::OK;
}

void UseHealthStatus(grpc::ServerBuilder& builder,
                     std::shared_ptr<HealthStatus> status) {
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
      std::make_unique<HealthStatusInterface>(std::move(status))));
}

absl::Status ValidateListenAddress(absl::string_view flag,
                                   absl::string_view address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": \"", address, "\" is not HOST:PORT (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  if (host.empty()) return bad("no host; 0.0.0.0 means every interface");
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad("unclosed [IPv6]");
  } else if (host.find(':') != absl::string_view::npos) {
    return bad("an IPv6 address needs brackets: [::]:PORT");
  }
  int port = 0;
  if (port_text.empty() || !absl::SimpleAtoi(port_text, &port) || port < 0 ||
      port > 65535) {
    return bad("the port must be a number in 0..65535");
  }
  return absl::OkStatus();
}

HealthOnlyServer::HealthOnlyServer(std::shared_ptr<const HealthStatus> status)
    : service_(std::move(status)) {}

absl::StatusOr<std::unique_ptr<HealthOnlyServer>> HealthOnlyServer::Start(
    const std::string& listen, std::shared_ptr<const HealthStatus> status) {
  if (absl::Status valid = ValidateListenAddress("--health_listen", listen);
      !valid.ok()) {
    return valid;
  }
  std::unique_ptr<HealthOnlyServer> s(new HealthOnlyServer(std::move(status)));
  grpc::ServerBuilder builder;
  // Plaintext on purpose: its callers (the kubelet's probes) cannot speak
  // TLS, and it answers nothing but the serving status.
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(),
                           &s->port_);
  // gRPC sets SO_REUSEPORT by default, which would let this server share a
  // port with another server of the machine instead of failing to bind.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetOption(std::make_unique<NoPluginsOption>());
  // gRPC's built-in health service (enabled process-wide by the main server)
  // must not answer here with statuses of its own: this server's
  // HealthCheckServiceInterface is an empty table, never read.
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
      std::make_unique<HealthStatusInterface>(std::make_shared<HealthStatus>())));
  builder.RegisterService(&s->service_);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--health_listen: cannot serve on ", listen,
        " (address in use, or not an address of this machine?)"));
  }
  return s;
}

HealthOnlyServer::~HealthOnlyServer() { Shutdown(); }

void HealthOnlyServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
}

}  // namespace pshard
