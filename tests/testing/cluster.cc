#include "tests/testing/cluster.h"

#include <signal.h>
#include <sys/stat.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "security/access_directory.h"
#include "security/access_policy.h"
#include "security/server_access_flags.h"
#include "security/transport_flags.h"

namespace pshard::testing {
namespace {

template <typename Service>
absl::StatusOr<std::unique_ptr<typename Service::Stub>> MakeStub(
    const std::string& address, const security::TransportSecurity& security) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::NewChannel(address, security));
  return Service::NewStub(std::move(channel));
}

void SetDeadline(grpc::ClientContext* context, absl::Duration d) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(d));
}

std::string Tail(const std::string& path, size_t max_bytes) {
  std::string text = ReadFile(path);
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(
    const ClusterOptions& options) {
  std::unique_ptr<Cluster> cluster(new Cluster());
  cluster->dir_ = MakeTempDir("cluster");
  // Each server's flags, and the test client's settings.
  security::TransportSecurity coordinator_tls = security::Plaintext();
  cluster->client_security_ = security::Plaintext();
  if (options.tls) {
    ASSIGN_OR_RETURN(cluster->certificates_,
                     security::CertificateDirectory::Create(
                         cluster->dir_ + "/tls", "pshard test cluster CA",
                         absl::Now(), absl::Hours(24)));
    ASSIGN_OR_RETURN(coordinator_tls,
                     cluster->certificates_->Issue("pshard-coordinator"));
    coordinator_tls.require_client_certificate = true;
    coordinator_tls.reload_interval = options.tls_reload_interval;
    ASSIGN_OR_RETURN(cluster->client_security_,
                     cluster->certificates_->Issue("pshardctl"));
  }
  std::vector<std::string> access_flags;
  if (options.access) {
    cluster->access_dir_ = cluster->dir_ + "/access";
    if (mkdir(cluster->access_dir_.c_str(), 0700) != 0) {
      return absl::InternalError("cannot make " + cluster->access_dir_);
    }
    security::AccessDirectory access(cluster->access_dir_);
    for (const auto& [name, role] :
         {std::pair<std::string, security::Role>{"admin",
                                                 security::Role::kAdmin},
          {"alice", security::Role::kSubmit},
          {"bob", security::Role::kSubmit},
          {"viewer", security::Role::kRead}}) {
      RETURN_IF_ERROR(access.AddToken(name, {role}).status());
    }
    for (int i = 0; i < options.workers; ++i) {
      RETURN_IF_ERROR(
          access
              .AddToken(absl::StrCat(options.worker_name_prefix, i),
                        {security::Role::kWorker})
              .status());
    }
    RETURN_IF_ERROR(access.Write());
    access_flags = security::AccessFlags(access.settings());
    cluster->client_security_ = cluster->client_security_as("admin");
  }
  CoordinatorOptions coordinator_options;
  coordinator_options.security_flags =
      security::TransportSecurityFlags(coordinator_tls);
  for (const std::string& flag : access_flags) {
    coordinator_options.security_flags.push_back(flag);
  }
  coordinator_options.dir = cluster->dir_;
  coordinator_options.state_path = cluster->dir_ + "/state.db";
  coordinator_options.heartbeat_interval = options.heartbeat_interval;
  coordinator_options.worker_timeout = options.worker_timeout;
  coordinator_options.extra_flags = options.coordinator_flags;
  absl::StatusOr<RunningCoordinator> coordinator =
      StartCoordinator(coordinator_options);
  if (!coordinator.ok()) return coordinator.status();
  cluster->logs_.push_back(coordinator->log);
  coordinator_options.port = coordinator->port;
  cluster->coordinator_options_ = coordinator_options;
  cluster->coordinator_ = std::move(coordinator->process);
  cluster->address_ = coordinator->address();
  const std::string& address = cluster->address_;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::NewChannel(address, cluster->client_security_));
  cluster->client_ = std::make_unique<cli::CoordinatorClient>(
      std::move(channel), address, absl::Seconds(10));

  int registered = 0;
  for (int i = 0; i < options.workers; ++i) {
    const std::string wport = absl::StrCat(cluster->dir_, "/worker", i, ".port");
    const std::string wlog = absl::StrCat(cluster->dir_, "/worker", i, ".log");
    cluster->logs_.push_back(wlog);
    std::vector<std::string> argv = {
        RunfilePath("worker/pshard-worker"), "--coordinator=" + address,
        absl::StrCat("--name=", options.worker_name_prefix, i),
        "--listen=127.0.0.1:0", "--port_file=" + wport, "--host=127.0.0.1"};
    security::TransportSecurity worker_tls = security::Plaintext();
    if (options.tls) {
      ASSIGN_OR_RETURN(worker_tls,
                       cluster->certificates_->Issue(absl::StrCat(
                           options.worker_name_prefix, i)));
      worker_tls.require_client_certificate = true;
      worker_tls.reload_interval = options.tls_reload_interval;
    }
    for (std::string& flag : security::TransportSecurityFlags(worker_tls)) {
      argv.push_back(std::move(flag));
    }
    for (const std::string& flag : access_flags) argv.push_back(flag);
    if (options.access) {
      argv.push_back("--token_file=" +
                     cluster->token_file(
                         absl::StrCat(options.worker_name_prefix, i)));
    }
    for (const std::string& flag : options.worker_flags) {
      argv.push_back(absl::StrReplaceAll(flag, {{"{i}", absl::StrCat(i)}}));
    }
    const int local_ranks =
        i < static_cast<int>(options.local_ranks.size()) ? options.local_ranks[i]
                                                         : 1;
    if (local_ranks != 1) {
      argv.push_back(absl::StrCat("--local_ranks=", local_ranks));
    }
    registered += local_ranks;
    absl::StatusOr<std::unique_ptr<Subprocess>> worker =
        Subprocess::Start(argv, {}, wlog);
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(*std::move(worker));
    for (int j = 0; j < local_ranks; ++j) {
      absl::StatusOr<int> p = WaitForPortFile(
          local_ranks == 1 ? wport : absl::StrCat(wport, ".", j),
          absl::Seconds(30));
      if (!p.ok()) return p.status();
      cluster->worker_ports_.push_back(*p);
    }
  }
  if (!cluster->WaitForIdle(registered, absl::Seconds(30))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "workers did not all register as IDLE:\n", cluster->Logs()));
  }
  return cluster;
}

Cluster::~Cluster() {
  // Workers first (SIGTERM: they abort their jobs and exit), then the
  // coordinator; Subprocess kills whatever is left.
  for (auto& w : workers_) {
    if (w->running()) (void)w->Signal(SIGTERM);
  }
  for (auto& w : workers_) (void)w->Wait(absl::Seconds(10));
  if (coordinator_ != nullptr && coordinator_->running()) {
    (void)coordinator_->Signal(SIGTERM);
    (void)coordinator_->Wait(absl::Seconds(10));
  }
}

absl::Status Cluster::KillCoordinator() {
  RETURN_IF_ERROR(coordinator_->Signal(SIGKILL));
  return coordinator_->Wait(absl::Seconds(10)).status();
}

absl::Status Cluster::RestartCoordinator() {
  ASSIGN_OR_RETURN(RunningCoordinator restarted,
                   StartCoordinator(coordinator_options_));
  coordinator_ = std::move(restarted.process);
  return absl::OkStatus();
}

std::vector<std::string> Cluster::ClientFlags() const {
  std::vector<std::string> flags =
      security::TransportSecurityFlags(client_security_);
  if (!access_dir_.empty()) flags.push_back("--token_file=" + token_file("admin"));
  return flags;
}

std::string Cluster::token_file(const std::string& principal) const {
  return absl::StrCat(access_dir_, "/", principal, ".token");
}

security::TransportSecurity Cluster::client_security_as(
    const std::string& principal) const {
  security::TransportSecurity s = client_security_;
  s.bearer_token.clear();
  if (!principal.empty()) {
    absl::StatusOr<std::string> token =
        security::ReadTokenFile(token_file(principal), principal);
    if (token.ok()) s.bearer_token = *token;
  }
  return s;
}

std::string Cluster::worker_status_address(int i) const {
  return absl::StrCat("127.0.0.1:", worker_ports_[i]);
}

absl::StatusOr<v1::Job> Cluster::Submit(const v1::JobSpec& spec) {
  return client_->SubmitJob(spec);
}

absl::StatusOr<v1::Job> Cluster::GetJob(const std::string& id) {
  return client_->GetJob(id);
}

absl::StatusOr<v1::ShardAssignment> Cluster::ShardAssignment(
    const std::string& id) {
  return client_->GetShardAssignment(id);
}

absl::StatusOr<v1::Job> Cluster::Cancel(const std::string& id) {
  return client_->CancelJob(id, "test cancels it");
}

absl::StatusOr<v1::Job> Cluster::WaitForEnd(const std::string& id,
                                            absl::Duration timeout) {
  absl::StatusOr<v1::Job> job;
  bool ended = WaitUntil(
      [&] {
        job = GetJob(id);
        return job.ok() && (job->state() == v1::SUCCEEDED ||
                            job->state() == v1::FAILED ||
                            job->state() == v1::CANCELLED);
      },
      timeout);
  if (!job.ok()) return job.status();
  if (!ended) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", id, " still ", v1::JobState_Name(job->state()),
                     " after ", absl::FormatDuration(timeout), "\n", Logs()));
  }
  return job;
}

absl::StatusOr<std::vector<v1::JobEvent>> Cluster::Events(
    const std::string& id, absl::Duration timeout) {
  std::vector<v1::JobEvent> events;
  absl::Status status = client_->WatchJob(
      id, /*after_sequence=*/0, timeout,
      [&events](const v1::JobEvent& event) { events.push_back(event); },
      /*cancel=*/nullptr);
  if (!status.ok()) return status;
  return events;
}

absl::StatusOr<std::vector<v1::WorkerInfo>> Cluster::Workers(
    bool include_lost) {
  return client_->ListWorkers(include_lost);
}

absl::StatusOr<v1::GetWorkerStatusResponse> Cluster::WorkerStatus(int i) {
  ASSIGN_OR_RETURN(auto stub, MakeStub<v1::WorkerStatus>(
                                   worker_status_address(i), client_security_));
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  v1::GetWorkerStatusResponse response;
  grpc::Status status =
      stub->GetStatus(&context, v1::GetWorkerStatusRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status, "GetStatus");
  return response;
}

absl::Status Cluster::WorkerHealth(int i, const std::string& service) {
  ASSIGN_OR_RETURN(auto stub,
                   MakeStub<grpc::health::v1::Health>(worker_status_address(i),
                                                      client_security_));
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  // service "" asks for the server's overall health.
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, "Health/Check");
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "worker is ", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())));
  }
  return absl::OkStatus();
}

bool Cluster::WaitForIdle(int count, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        auto workers = Workers(false);
        if (!workers.ok()) return false;
        int idle = 0;
        for (const auto& w : *workers) idle += w.state() == v1::IDLE;
        return idle >= count;
      },
      timeout);
}

std::string Cluster::Logs() const {
  std::string out;
  for (const auto& log : logs_) {
    absl::StrAppend(&out, "==> ", log, " <==\n", Tail(log, 3000), "\n");
  }
  return out;
}

}  // namespace pshard::testing
