// pshard-coordinator: the control plane of pshard as one process. Flags are
// read here only and turned into typed options.
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/binary_flags.h"
#include "common/logging.h"
#include "common/logging_flags.h"
#include "common/open_files.h"
#include "common/port_file.h"
#include "common/clock.h"
#include "common/health.h"
#include "common/health_flags.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"
#include "common/metrics_endpoint.h"
#include "server/coordinator_metrics.h"
#include "security/server_access_flags.h"
#include "security/transport_flags.h"
#include "server/coordinator_server.h"

ABSL_FLAG(std::string, listen, "",
          "host:port to serve on; port 0 picks a free port (default "
          "0.0.0.0:7070, or 127.0.0.1:7070 with --insecure)");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound port is written there once serving");
ABSL_FLAG(std::string, state_path, "pshard-coordinator.db",
          "SQLite state file (created if missing)");
ABSL_FLAG(std::string, state_sync, "full",
          "full: a commit the coordinator acknowledged survives a power loss; "
          "normal: it survives a crash of the coordinator (kill -9), but a "
          "power loss may lose the last commits (faster on slow disks)");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "how often workers heartbeat");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(5),
          "a worker silent this long is LOST");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port of the Prometheus endpoint (GET /metrics): jobs, queue, "
          "workers, heartbeat age, RPCs by method and code; empty: none");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics endpoint's port here once it listens (for "
          "--metrics_listen with port 0)");
ABSL_FLAG(absl::Duration, blame_window, absl::Seconds(2),
          "how long a rank's failure caused by a peer (a closed connection, a "
          "collective deadline) waits for that peer's worker to be found LOST, "
          "which then takes the blame and the job restarts (max_restarts); 0: "
          "the first failure reported decides. Set it above --worker_timeout "
          "for frozen workers to be blamed too");
ABSL_FLAG(absl::Duration, head_reservation_after, absl::Minutes(5),
          "once the queue's head (the first job that could start on the pool "
          "but does not fit yet) has waited this long, later jobs no longer "
          "start on the idle workers before it (backfill stops); 0: strict "
          "order");
ABSL_FLAG(int, max_watchers, 1024, "open WatchJob streams in all");
ABSL_FLAG(int, max_watchers_per_client, 8,
          "open WatchJob streams from one client (the host of its address)");

namespace {

// The write end of the self-pipe that the signal handler pokes.
int signal_pipe_write = -1;

void OnSignal(int sig) {
  const char c = static_cast<char>(sig);
  // write() is async-signal-safe; a full pipe just drops the extra signal.
  ssize_t ignored = write(signal_pipe_write, &c, 1);
  (void)ignored;
}


}  // namespace

int main(int argc, char** argv) {
  pshard::SetUpBinaryFlags(
      "pshard-coordinator",
      "the control plane of pshard (worker pool, jobs, rendezvous, shard "
      "assignment).\n\nusage: pshard-coordinator [--listen=HOST:PORT] "
      "[--state_path=FILE] (--tls_cert=F --tls_key=F | --insecure) "
      "[--auth_tokens=F] [FLAGS]",
      __FILE__,
      {std::string(pshard::security::kTransportFlagsFile),
       std::string(pshard::security::kServerAccessFlagsFile),
       std::string(pshard::kLoggingFlagsFile),
       std::string(pshard::kHealthFlagsFile)});
  absl::ParseCommandLine(argc, argv);
  if (absl::Status logging = pshard::InitLoggingFromFlags("pshard-coordinator");
      !logging.ok()) {
    fprintf(stderr, "pshard-coordinator: %s\n",
            std::string(logging.message()).c_str());
    return 2;
  }
  pshard::RaiseOpenFileLimitAtStart();
  // Abseil's Mutex deadlock detection (on in builds without NDEBUG, which is
  // Bazel's default) keeps a process-wide graph of every mutex under a global
  // lock; under thousands of RPCs a second it costs more than the work.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // SIGINT/SIGTERM: the handler writes to a pipe that main() waits on, so the
  // shutdown runs on the main thread whichever thread took the signal.
  int signal_pipe[2];
  if (pipe(signal_pipe) != 0) {
    perror("pshard-coordinator: pipe");
    return 1;
  }
  signal_pipe_write = signal_pipe[1];
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  pshard::coordinator::CoordinatorOptions options;
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.worker_timeout <= options.heartbeat_interval) {
    fprintf(stderr,
            "pshard-coordinator: need 0 < --heartbeat_interval < "
            "--worker_timeout\n");
    return 2;
  }
  options.recovery_grace = 2 * options.worker_timeout;
  options.blame_window = absl::GetFlag(FLAGS_blame_window);
  if (options.blame_window < absl::ZeroDuration()) {
    fprintf(stderr, "pshard-coordinator: --blame_window must be >= 0\n");
    return 2;
  }
  options.head_reservation_after = absl::GetFlag(FLAGS_head_reservation_after);
  if (options.head_reservation_after < absl::ZeroDuration()) {
    fprintf(stderr,
            "pshard-coordinator: --head_reservation_after must be >= 0\n");
    return 2;
  }
  const int max_watchers = absl::GetFlag(FLAGS_max_watchers);
  const int max_watchers_per_client = absl::GetFlag(FLAGS_max_watchers_per_client);
  if (max_watchers < 1 || max_watchers_per_client < 1) {
    fprintf(stderr,
            "pshard-coordinator: --max_watchers and --max_watchers_per_client "
            "must be >= 1\n");
    return 2;
  }

  // Checked before the state store is opened (and locked), so a bad flag
  // leaves nothing behind.
  const absl::StatusOr<pshard::HealthPortFlags> health =
      pshard::HealthPortFlagsFromFlags();
  if (!health.ok()) {
    fprintf(stderr, "pshard-coordinator: %s\n",
            std::string(health.status().message()).c_str());
    return 2;
  }
  const pshard::security::TransportSecurity security =
      pshard::security::TransportSecurityFromFlags();
  if (absl::Status valid = pshard::security::ValidateServerSecurity(security);
      !valid.ok()) {
    fprintf(stderr, "pshard-coordinator: %s\n",
            std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<pshard::security::AccessPolicy>> access =
      pshard::security::AccessPolicyFromFlags(security);
  if (!access.ok()) {
    fprintf(stderr, "pshard-coordinator: %s\n",
            std::string(access.status().message()).c_str());
    return 2;
  }
  if (*access == nullptr && !security.insecure) {
    LOG(WARNING) << "no --auth_tokens or --auth_identities: every client "
                    "holding a certificate from --tls_ca may call every RPC";
  }

  const pshard::Clock& clock = pshard::Clock::Real();
  const std::string state_path = absl::GetFlag(FLAGS_state_path);
  const std::string state_sync = absl::GetFlag(FLAGS_state_sync);
  if (state_sync != "full" && state_sync != "normal") {
    fprintf(stderr,
            "pshard-coordinator: --state_sync: must be full or normal, got "
            "\"%s\"\n",
            state_sync.c_str());
    return 2;
  }
  pshard::coordinator::SqliteOptions sqlite_options;
  sqlite_options.synchronous_full = state_sync == "full";
  auto store = pshard::coordinator::StateStore::Open(state_path, sqlite_options);
  if (!store.ok()) {
    LOG(ERROR) << "opening the state store: " << store.status().message();
    return 1;
  }
  auto metrics = pshard::StartMetricsEndpoint(
      absl::GetFlag(FLAGS_metrics_listen), absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics.ok()) {
    LOG(ERROR) << "--metrics_listen: " << metrics.status().message();
    return 1;
  }
  if (*metrics != nullptr) {
    *store = std::make_unique<pshard::server::TimedStateStore>(
        *std::move(store), (*metrics)->registry());
  }
  auto coordinator = pshard::coordinator::Coordinator::Create(
      options, &clock, *std::move(store));
  if (!coordinator.ok()) {
    LOG(ERROR) << "loading " << state_path << ": "
               << coordinator.status().message();
    return 1;
  }

  pshard::server::ServerOptions server_options;
  server_options.security = security;
  server_options.listen = pshard::security::ListenAddress(
      absl::GetFlag(FLAGS_listen), 7070, server_options.security);
  server_options.health_listen = health->listen;
  server_options.services.max_watchers = max_watchers;
  server_options.services.max_watchers_per_client = max_watchers_per_client;
  server_options.services.access = access->get();
  if (*metrics != nullptr) {
    (*metrics)->Add(std::make_shared<pshard::server::CoordinatorMetrics>(
        coordinator->get()));
    server_options.metrics = &(*metrics)->registry();
  }
  auto server = pshard::server::CoordinatorServer::Start(
      coordinator->get(), &clock, server_options);
  if (!server.ok()) {
    LOG(ERROR) << "starting the server: " << server.status().message();
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (absl::Status written = port_file.empty()
                                ? absl::OkStatus()
                                : pshard::WritePortFile(port_file, (*server)->port());
      !written.ok()) {
    LOG(ERROR) << "--port_file: " << written;
    return 1;
  }
  if (absl::Status written =
          (*server)->health_port() == 0
              ? absl::OkStatus()
              : health->WritePort((*server)->health_port());
      !written.ok()) {
    LOG(ERROR) << written.message();
    return 1;
  }
  if ((*server)->health_port() != 0) {
    LOG(INFO) << "health (plaintext, grpc.health.v1 only) on port "
              << (*server)->health_port();
  }
  LOG(INFO) << "serving on port " << (*server)->port() << ", state in "
            << state_path << " (heartbeat_interval "
            << absl::FormatDuration(options.heartbeat_interval)
            << ", worker_timeout "
            << absl::FormatDuration(options.worker_timeout) << ")";

  char sig = 0;
  while (read(signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  LOG(INFO) << "signal " << static_cast<int>(sig) << ", shutting down";
  (*server)->Shutdown(absl::Seconds(2));
  server->reset();
  metrics->reset();  // its collector reads the coordinator
  coordinator->reset();
  return 0;
}
