// pshard-worker: one worker of the pool. Registers with the coordinator, runs
// the jobs it is given, serves WorkerStatus (its status and its program jobs'
// logs, plus gRPC health and reflection) on --listen. SIGINT/SIGTERM abort any running job and exit 0.
// With --local_ranks N > 1 it supervises N such workers instead
// (worker/local_ranks.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics_endpoint.h"
#include "common/rpc_metrics.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "common/binary_flags.h"
#include "common/logging.h"
#include "common/logging_flags.h"
#include "common/open_files.h"
#include "common/clock.h"
#include "common/health.h"
#include "common/health_flags.h"
#include "common/port_file.h"
#include "server/reflection_v1.h"
#include "worker/gpu/backend_choice.h"
#include "worker/gpu/device.h"
#include "worker/drain_control.h"
#include "worker/local_ranks.h"
#include "worker/program_log_flags.h"
#include "worker/runtime/agent.h"
#include "security/client_token_flags.h"
#include "security/server_access_flags.h"
#include "security/transport_flags.h"
#include "worker/runtime/worker_metrics.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/program_log_stream.h"
#include "worker/runtime/worker_status_service.h"
#include "worker/workload/blas_threads.h"

ABSL_FLAG(std::string, coordinator, "",
          "host:port of the coordinator (required)");
ABSL_FLAG(std::string, name, "",
          "stable worker name; default <hostname>-<pid>");
ABSL_FLAG(std::string, listen, "",
          "address of the WorkerStatus server; port 0 picks a free port "
          "(default 0.0.0.0:7071, or 127.0.0.1:7071 with --insecure)");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound WorkerStatus port is written here once serving");
ABSL_FLAG(std::string, host, "",
          "host name peers use to reach this worker (Gloo); default the "
          "machine's host name");
ABSL_FLAG(std::string, advertise_host, "",
          "host name the coordinator shows for this worker's status server "
          "(what pshardctl logs dials, so the name its TLS certificate "
          "carries); default --host. In Kubernetes, the pod's name under the "
          "headless Service.");
ABSL_FLAG(std::string, device, "cpu", "\"cpu\", \"auto\" or \"cuda:N\"");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port of the Prometheus endpoint (GET /metrics): steps, step "
          "time, bytes sent, optimizer-state bytes, checkpoint stalls, RPCs; "
          "empty: none");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics endpoint's port here once it listens");
ABSL_FLAG(absl::Duration, result_retry_for, absl::Minutes(10),
          "how long a job's result is retried while the coordinator cannot be "
          "reached (a restart, an outage): the job it finished is then known "
          "to have finished, not re-run");
ABSL_FLAG(int, local_ranks, 1,
          "ranks this node runs (1..64), as torchrun's nproc_per_node: with "
          "N > 1 this process supervises N one-rank workers of this binary, "
          "named <name>:<i>, on ports base+i, with --device=auto giving rank "
          "i cuda:i (worker/local_ranks.h)");
ABSL_FLAG(int, local_rank, -1,
          "internal: set by a --local_ranks supervisor on its children (this "
          "child's index)");
ABSL_FLAG(int, local_world_size, 0,
          "internal: set by a --local_ranks supervisor on its children (its "
          "--local_ranks)");
ABSL_FLAG(std::string, control_dir, "",
          "a directory only this pod can write (an emptyDir), where a "
          "preStop hook's --drain_and_wait asks this worker to drain "
          "(worker/drain_control.h); empty: none. A --local_ranks node's "
          "rank i uses <dir>/<i>");
ABSL_FLAG(bool, drain_and_wait, false,
          "instead of running a worker: ask the worker(s) of --control_dir "
          "to drain (no new job) and wait until each runs no job, or its job "
          "has committed its next checkpoint, or --drain_timeout passes "
          "(exit 1); a Kubernetes preStop hook");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Minutes(5),
          "with --drain_and_wait: how long to wait; keep it below the pod's "
          "terminationGracePeriodSeconds");
ABSL_FLAG(int, blas_threads, 0,
          "threads for the mlp workload's BLAS calls; 0: $OPENBLAS_NUM_THREADS "
          "if set, else 1 (one rank per core, as torchrun's OMP_NUM_THREADS=1)");

namespace {

volatile sig_atomic_t g_signalled = 0;

void OnSignal(int) { g_signalled = 1; }

std::string Hostname() {
  char buffer[256] = {0};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "localhost";
  return buffer;
}

std::string RandomIncarnation() {
  std::random_device device;
  return absl::StrFormat("%08x%08x", device(), device());
}

// "0.0.0.0:7071" -> host part; "[::]:7071" -> "[::]".
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  pshard::SetUpBinaryFlags(
      "pshard-worker",
      "one worker of a pshard pool: registers with the coordinator and runs "
      "the jobs it is given.\n\nusage: pshard-worker --coordinator=HOST:PORT "
      "[--name=N] [--listen=ADDR] [--device=cpu|auto|cuda:N] "
      "(--tls_cert=F --tls_key=F --tls_ca=F | --insecure) [--token_file=F] "
      "[FLAGS]",
      __FILE__,
      {std::string(pshard::security::kTransportFlagsFile),
       std::string(pshard::security::kClientTokenFlagsFile),
       std::string(pshard::security::kServerAccessFlagsFile),
       std::string(pshard::kLoggingFlagsFile),
       std::string(pshard::kHealthFlagsFile),
       std::string(pshard::worker::kProgramLogFlagsFile)});
  absl::ParseCommandLine(argc, argv);
  if (absl::Status logging = pshard::InitLoggingFromFlags("pshard-worker");
      !logging.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(logging.message()).c_str());
    return 2;
  }
  pshard::RaiseOpenFileLimitAtStart();

  if (absl::GetFlag(FLAGS_drain_and_wait)) {
    // The preStop hook: nothing of a worker's own starts.
    const std::string dir = absl::GetFlag(FLAGS_control_dir);
    const absl::Duration timeout = absl::GetFlag(FLAGS_drain_timeout);
    if (dir.empty() || timeout <= absl::ZeroDuration()) {
      std::fprintf(stderr,
                   "pshard-worker: --drain_and_wait needs --control_dir and a "
                   "positive --drain_timeout\n");
      return 2;
    }
    const absl::Status drained = pshard::worker::DrainAndWait(dir, timeout);
    if (absl::IsInvalidArgument(drained)) {
      std::fprintf(stderr, "pshard-worker: %s\n",
                   std::string(drained.message()).c_str());
      return 2;
    }
    if (!drained.ok()) {
      std::fprintf(stderr, "pshard-worker: %s\n",
                   std::string(drained.message()).c_str());
      return 1;
    }
    std::fprintf(stderr, "pshard-worker: drained\n");
    return 0;
  }

  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::fprintf(stderr, "pshard-worker: --coordinator is required\n");
    return 2;
  }
  // One set of TLS settings for both ends: the worker serves its status
  // RPCs with its certificate and presents the same one to the coordinator.
  const pshard::security::TransportSecurity security =
      pshard::security::TransportSecurityFromFlags();
  if (absl::Status valid = pshard::security::ValidateServerSecurity(security);
      !valid.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(valid.message()).c_str());
    return 2;
  }
  // Who may read this worker's status and logs.
  absl::StatusOr<std::unique_ptr<pshard::security::AccessPolicy>> access =
      pshard::security::AccessPolicyFromFlags(security);
  if (!access.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(access.status().message()).c_str());
    return 2;
  }
  // What this worker presents to the coordinator: its name's credential.
  absl::StatusOr<std::string> token = pshard::security::BearerTokenFromFlags();
  if (!token.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }

  const absl::StatusOr<pshard::HealthPortFlags> health =
      pshard::HealthPortFlagsFromFlags();
  if (absl::Status valid = health.status(); !valid.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(valid.message()).c_str());
    return 2;
  }

  const int local_ranks = absl::GetFlag(FLAGS_local_ranks);
  if (absl::Status valid = pshard::worker::ValidateLocalRanks(
          local_ranks, absl::GetFlag(FLAGS_device));
      !valid.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(valid.message()).c_str());
    return 2;
  }
  if (local_ranks > 1) {
    // A supervisor only: the children register, serve and run the ranks.
    pshard::worker::LocalRanksPlan plan;
    char exe[4096] = {0};
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
      std::fprintf(stderr, "pshard-worker: cannot resolve /proc/self/exe\n");
      return 1;
    }
    plan.binary = std::string(exe, len);
    for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
      // What differs from its default is what was given (the parser's
      // record of "specified" is not public).
      const std::string value = flag->CurrentValue();
      if (value != flag->DefaultValue()) {
        plan.specified_flags.emplace_back(std::string(flag_name), value);
      }
    }
    plan.name = absl::GetFlag(FLAGS_name);
    if (plan.name.empty()) plan.name = absl::StrCat(Hostname(), "-", getpid());
    plan.host = absl::GetFlag(FLAGS_host);
    if (plan.host.empty()) plan.host = Hostname();
    plan.listen = pshard::security::ListenAddress(absl::GetFlag(FLAGS_listen),
                                                  7071, security);
    plan.device_flag = absl::GetFlag(FLAGS_device);
    if (plan.device_flag == "auto") {
      plan.cuda_device_count = pshard::worker::CudaDeviceCount();
    }
    plan.local_ranks = local_ranks;
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    LOG(INFO) << "pshard-worker " << plan.name << ": supervising "
              << local_ranks << " local ranks on host " << plan.host;
    return pshard::worker::SuperviseLocalRanks(plan, &g_signalled);
  }
  const int local_rank = absl::GetFlag(FLAGS_local_rank);
  const int local_world_size = absl::GetFlag(FLAGS_local_world_size);
  if (local_rank != -1 &&
      (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size)) {
    std::fprintf(stderr,
                 "pshard-worker: --local_rank=%d, --local_world_size=%d: want "
                 "0 <= local_rank < local_world_size (set by a --local_ranks "
                 "supervisor)\n",
                 local_rank, local_world_size);
    return 2;
  }

  // Where a preStop hook asks for a drain (worker/drain_control.h).
  std::optional<pshard::worker::DrainControl> drain_control;
  if (const std::string dir = absl::GetFlag(FLAGS_control_dir); !dir.empty()) {
    absl::StatusOr<pshard::worker::DrainControl> opened =
        pshard::worker::DrainControl::Open(dir);
    if (!opened.ok()) {
      std::fprintf(stderr, "pshard-worker: %s\n",
                   std::string(opened.status().message()).c_str());
      return 2;
    }
    drain_control = *std::move(opened);
  }

  // Metrics before the servers that count into them; they outlive both.
  auto metrics = pshard::StartMetricsEndpoint(
      absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics.ok()) {
    LOG(ERROR) << "--metrics_listen: " << metrics.status().message();
    return 1;
  }
  std::unique_ptr<pshard::worker::WorkerMetrics> worker_metrics;
  if (*metrics != nullptr) {
    worker_metrics =
        std::make_unique<pshard::worker::WorkerMetrics>((*metrics)->registry());
  }
  std::string why_no_cuda;
  const int cuda_devices = pshard::worker::CudaDeviceCount(&why_no_cuda);
  absl::StatusOr<pshard::worker::WorkerDevice> device =
      pshard::worker::ResolveWorkerDevice(absl::GetFlag(FLAGS_device),
                                          cuda_devices, why_no_cuda);
  if (!device.ok()) {
    std::fprintf(stderr, "pshard-worker: --device: %s\n",
                 device.status().ToString().c_str());
    return 2;
  }
  int blas_threads = absl::GetFlag(FLAGS_blas_threads);
  if (blas_threads < 0) {
    std::fprintf(stderr, "pshard-worker: --blas_threads must be >= 0, got %d\n",
                 blas_threads);
    return 2;
  }
  const char* blas_env = std::getenv("OPENBLAS_NUM_THREADS");
  if (blas_threads == 0 && !(blas_env != nullptr &&
                             absl::SimpleAtoi(blas_env, &blas_threads) &&
                             blas_threads > 0)) {
    blas_threads = 1;
  }
  pshard::worker::SetBlasNumThreads(blas_threads);

  const int64_t log_max_bytes = pshard::worker::ProgramLogMaxBytesFlag();
  if (log_max_bytes < 1024) {
    std::fprintf(stderr,
                 "pshard-worker: --log_max_bytes must be >= 1024, got %lld\n",
                 static_cast<long long>(log_max_bytes));
    return 2;
  }

  std::string host = absl::GetFlag(FLAGS_host);
  if (host.empty()) host = Hostname();
  if (const std::string advertise = absl::GetFlag(FLAGS_advertise_host);
      advertise.size() > 253 ||
      advertise.find_first_of(":/ \t") != std::string::npos) {
    std::fprintf(stderr,
                 "pshard-worker: --advertise_host: want a host name of at "
                 "most 253 characters without a port, got \"%s\"\n",
                 advertise.substr(0, 300).c_str());
    return 2;
  }
  std::string name = absl::GetFlag(FLAGS_name);
  if (name.empty()) name = absl::StrCat(Hostname(), "-", getpid());

  // SIGINT/SIGTERM only set a flag (gRPC's threads may exist before main,
  // so blocking the signals for sigwait would not catch them all); the main
  // loop below notices within its polling period.
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  // As a client, the worker presents its certificate; requiring one of
  // others is its status server's business.
  pshard::security::TransportSecurity client_security = security;
  client_security.require_client_certificate = false;
  client_security.bearer_token = *token;
  absl::StatusOr<std::unique_ptr<pshard::worker::ControlPlane>> control =
      pshard::worker::NewGrpcControlPlane(coordinator, client_security);
  if (!control.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(control.status().message()).c_str());
    return 2;
  }

  pshard::worker::AgentOptions options;
  options.name = name;
  options.incarnation = RandomIncarnation();
  options.host = host;
  options.gloo_hostname = host;
  options.worker_device = *device;
  options.coordinator_address = coordinator;
  options.coordinator_security = client_security;
  options.program_log_dir = pshard::worker::ProgramLogDirFlag();
  if (options.program_log_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    options.program_log_dir =
        absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                     "/pshard-worker-", name, "/logs");
  }
  options.program_log_max_bytes = log_max_bytes;
  options.result_retry_for = absl::GetFlag(FLAGS_result_retry_for);
  if (options.result_retry_for < absl::ZeroDuration()) {
    fprintf(stderr, "pshard-worker: --result_retry_for: must be >= 0\n");
    return 2;
  }
  // The one place the worker's time comes from.
  options.clock = &pshard::Clock::Real();
  options.device_kind = device->is_gpu() ? pshard::v1::GPU : pshard::v1::CPU;
  options.device = device->name;
  if (device->is_gpu()) {
    absl::StatusOr<std::string> description =
        pshard::worker::CudaDeviceDescription(device->cuda_device);
    if (description.ok()) {
      options.device = absl::StrCat(device->name, " ", *description);
    }
  }

  options.metrics = worker_metrics.get();

  // The status server first: its address is part of the registration.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The agent is created before the service that points at it, and the
  // server is shut down before the agent goes.
  std::unique_ptr<pshard::worker::Agent> agent;
  int port = 0;
  const std::string listen = pshard::security::ListenAddress(
      absl::GetFlag(FLAGS_listen), 7071, security);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      pshard::security::ServerCredentials(security);
  if (!credentials.ok()) {
    std::fprintf(stderr, "pshard-worker: %s\n",
                 std::string(credentials.status().message()).c_str());
    return 2;
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, *credentials, &port);
  // One table of serving statuses for the status server and the plaintext
  // health-only server (--health_listen), so that both say the same.
  const auto health_status = std::make_shared<pshard::HealthStatus>();
  pshard::HealthService health_service(health_status);
  pshard::UseHealthStatus(builder, health_status);
  builder.RegisterService(&health_service);
  if (*metrics != nullptr) {
    builder.experimental().SetInterceptorCreators(
        pshard::RpcMetricsInterceptors((*metrics)->registry()));
  }
  // The agent exists only once the port is known; until then the service
  // answers Unavailable. `agent` outlives the server (shut down first).
  absl::Mutex agent_mu;
  // A rank's log is followed while the agent runs that rank.
  pshard::worker::ProgramLogStreamerOptions log_options;
  log_options.log_dir = options.program_log_dir;
  log_options.worker_name = absl::StrCat("worker ", name);
  log_options.clock = options.clock;
  const pshard::worker::ProgramLogStreamer logs(
      log_options, [&](absl::string_view job_id, int rank) {
        absl::MutexLock lock(&agent_mu);
        if (agent == nullptr) return false;
        const pshard::v1::GetWorkerStatusResponse status = agent->Status();
        return status.state() != pshard::v1::IDLE &&
               status.job_id() == job_id && status.rank() == rank;
      });
  pshard::worker::WorkerStatusService service(
      [&]() -> absl::StatusOr<pshard::v1::GetWorkerStatusResponse> {
        absl::MutexLock lock(&agent_mu);
        if (agent == nullptr) return absl::UnavailableError("worker starting");
        return agent->Status();
      },
      &logs, access->get());
  builder.RegisterService(&service);
  pshard::server::ReflectionV1Service reflection_v1(
      {pshard::v1::WorkerStatus::service_full_name()});
  builder.RegisterService(&reflection_v1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LOG(ERROR) << "cannot listen on " << listen;
    return 1;
  }
  // The service by name as well as the server (""), so that a probe of
  // pshard.v1.WorkerStatus answers rather than NOT_FOUND.
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
      health != nullptr) {
    health->SetServingStatus(pshard::v1::WorkerStatus::service_full_name(), true);
  }
  // Beside the status server, on its own threads too: the probes answer
  // while a job trains.
  std::unique_ptr<pshard::HealthOnlyServer> health_server;
  if (!health->listen.empty()) {
    absl::StatusOr<std::unique_ptr<pshard::HealthOnlyServer>> started =
        pshard::HealthOnlyServer::Start(health->listen, health_status);
    if (!started.ok()) {
      LOG(ERROR) << started.status().message();
      server->Shutdown();
      return 1;
    }
    health_server = *std::move(started);
    if (absl::Status written = health->WritePort(health_server->port());
        !written.ok()) {
      LOG(ERROR) << written.message();
      server->Shutdown();
      return 1;
    }
    LOG(INFO) << "health (plaintext, grpc.health.v1 only) on port "
              << health_server->port();
  }
  const std::string advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.address = absl::StrCat(
      !advertise_host.empty() ? advertise_host
      : absl::StartsWith(HostOf(listen), "0.0.0.0") || HostOf(listen) == "[::]"
          ? host
          : HostOf(listen),
      ":", port);
  {
    absl::MutexLock lock(&agent_mu);
    agent = std::make_unique<pshard::worker::Agent>(control->get(), options);
  }
  agent->Start();

  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (absl::Status written = port_file.empty()
                                ? absl::OkStatus()
                                : pshard::WritePortFile(port_file, port);
      !written.ok()) {
    LOG(ERROR) << "--port_file: " << written;
    agent->Stop(absl::CancelledError("startup failed"));
    server->Shutdown();
    return 1;
  }
  LOG(INFO) << "worker " << name
            << (local_rank >= 0 ? absl::StrCat(" (local rank ", local_rank,
                                               " of ", local_world_size, ")")
                                : std::string())
            << ": status on port " << port
            << ", coordinator " << coordinator << ", gloo host " << host
            << ", device " << options.device;

  // Wait for a signal or for a drain to complete. A drain asked through
  // --control_dir (a preStop hook) is answered, and the worker then waits
  // for the signal that follows it: its job, if it still runs, has a new
  // checkpoint to restart from. A coordinator's Drain directive ends the
  // process once drained.
  bool own_drain = false;
  bool told_drained = false;
  while (g_signalled == 0) {
    if (drain_control.has_value() && !own_drain &&
        drain_control->DrainRequested()) {
      own_drain = true;
      agent->Drain();
    }
    if (!agent->WaitForDrained(absl::Milliseconds(100))) continue;
    if (!own_drain) break;
    if (!told_drained) {
      told_drained = true;
      if (absl::Status marked = drain_control->MarkDrained(); !marked.ok()) {
        LOG(ERROR) << "--control_dir: " << marked;
      }
      LOG(INFO) << "drained; waiting for the signal to stop";
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const char* why = g_signalled != 0 ? "worker shutting down on a signal"
                                     : "worker drained";
  LOG(INFO) << why << "; stopping";
  // NOT_SERVING on both servers from here on.
  health_status->Shutdown();
  agent->Stop(absl::AbortedError(why));
  // gRPC's shutdown deadline is a point on gRPC's own (real) clock.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (health_server != nullptr) health_server->Shutdown(absl::ZeroDuration());
  return 0;
}
